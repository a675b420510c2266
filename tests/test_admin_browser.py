"""The admin in a real browser: headless Chromium from Debian's ``chromium``
package, driven by Playwright (never ``playwright install``: no download).

Set ``DLOCK_SKIP_BROWSER=1`` to skip it on a machine without Chromium; without
that, a missing browser fails the test (CI must run it). Screenshots are kept in
``artifacts/`` (or ``$DLOCK_ARTIFACTS_DIR``).
"""

from __future__ import annotations

import os
import re
import shutil
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db.models import DurationField, Value

from django_dlock.models import DistributedLock, LockWaiter
from django_dlock.rules.clock import DatabaseNow
from tests.utils import make_delayed_lock, make_lock

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.vendor_independent]

CHROMIUM = os.environ.get("DLOCK_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
ARTIFACTS = Path(os.environ.get("DLOCK_ARTIFACTS_DIR", Path(__file__).parent.parent / "artifacts"))
# A laptop's window: the list fits it with the admin's nav sidebar open.
SCREEN_WIDTH = 1280
SCREEN_HEIGHT = 800
PASSWORD = "correct horse battery staple"  # noqa: S105 - a throwaway test user


@pytest.fixture
def browser_page(tmp_path: Path) -> Any:
    """A page of a fresh headless Chromium (its own, new user-data-dir)."""
    if os.environ.get("DLOCK_SKIP_BROWSER") == "1":
        pytest.skip("DLOCK_SKIP_BROWSER=1")
    if not shutil.which(CHROMIUM):
        pytest.fail(
            f"No Chromium at {CHROMIUM}: install Debian's chromium package "
            "(scripts/test.sh does), or set DLOCK_SKIP_BROWSER=1 to skip this test."
        )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"),
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_FLAGS,
            viewport={"width": SCREEN_WIDTH, "height": SCREEN_HEIGHT},
        )
        try:
            page = context.pages[0] if context.pages else context.new_page()
            page.set_default_timeout(20_000)
            yield page
        finally:
            context.close()


# Owners as the API generates them (32 hex digits), and a long one.
OWNERS = {
    "report:monthly-2026-05": "cron@web-3.example.com:pid-48211",
    "job:42": "7f3a9c0e4d11b2c3d5e6f708192a3b4c",
    "job:43": "1b2c3d4e5f60718293a4b5c6d7e8f901",
    "billing.nightly": "0e4d11f2a3b4c5d6e7f8091a2b3c4d5e",
    "job:41": "9c8b7a6f5e4d3c2b1a09f8e7d6c5b4a3",
    "deploy:web_eu-1.release": "5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d",
}

# Owners of the lock() calls queued for job:43.
OWNERS_WAITING = ["a1b2c3d4e5f60718293a4b5c6d7e8f90", "0f1e2d3c4b5a69788796a5b4c3d2e1f0"]


@pytest.fixture
def staff_and_locks() -> None:
    """A staff user, locks of every kind and queued waiters, made before the
    browser starts: Playwright's sync API runs an event loop in this thread,
    where Django refuses ORM calls (so the test requests this fixture before
    ``browser_page``)."""
    User.objects.create_user("operator", password=PASSWORD, is_staff=True, is_superuser=True)
    make_lock("report:monthly-2026-05", OWNERS["report:monthly-2026-05"], expires_in=42.5)
    make_lock("job:42", OWNERS["job:42"], expires_in=25 * 60 + 30)
    make_lock("job:43", OWNERS["job:43"], expires_in=3 * 3600 + 60)
    make_lock("billing.nightly", OWNERS["billing.nightly"], expires_in=-(3 * 60 + 5))
    make_lock("job:41", OWNERS["job:41"])
    DistributedLock.objects.release("job:41", owner=OWNERS["job:41"])
    # Expired, in its lock-delay: the longest time left in words.
    make_delayed_lock(
        "deploy:web_eu-1.release", OWNERS["deploy:web_eu-1.release"], lock_delay=30 * 60
    )
    # Tokens as a lock table that has been in use a while shows them.
    for resource, token in [
        ("report:monthly-2026-05", 12),
        ("job:42", 7),
        ("job:43", 9_007_199_254_740_993),
        ("billing.nightly", 41),
    ]:
        DistributedLock.objects.filter(resource=resource).update(fencing_token=token)
    # Two lock() calls wait for job:43, one for job:42 (tickets live for the
    # test). The heads poll: a release hands the lock to a head that listens
    # (on SQLite), and these waiters have no process to take it.
    for resource, owner, ttl, channel, label in [
        ("job:43", OWNERS_WAITING[0], 60, "", "web-3 pid 4121"),
        ("job:43", OWNERS_WAITING[1], 600, "dlock_4122", ""),
        ("job:42", "5e6f708192a3b4c5d6e7f8091a2b3c4d", 30, "", ""),
    ]:
        waiter = LockWaiter.objects.create(
            resource=resource,
            owner=owner,
            expires_at=DatabaseNow(),
            ttl=timedelta(seconds=ttl),
            channel=channel,
            label=label,
        )
        LockWaiter.objects.filter(pk=waiter.pk).update(
            expires_at=DatabaseNow() + Value(timedelta(minutes=10), output_field=DurationField())
        )


def screenshot(page: Any, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"admin-{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def log_in(page: Any, live_server: Any) -> str:
    """Log in as the operator; return the changelist's URL (where it lands)."""
    changelist = f"{live_server.url}/admin/django_dlock/distributedlock/"
    page.goto(f"{live_server.url}/admin/login/?next=/admin/django_dlock/distributedlock/")
    page.fill("input[name=username]", "operator")
    page.fill("input[name=password]", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(changelist)
    return changelist


# The list's column headers, as the admin's template shows them (capitalized).
HEADERS = ["resource", "owner", "time left", "acquired / expires", "fencing token", "waiters"]


def assert_fits_the_screen(page: Any) -> None:
    """Every column of the list, whole, in the window (SCREEN_WIDTH x
    SCREEN_HEIGHT) with the admin's nav sidebar open: the list does not scroll
    sideways, every column header is inside the window, and no header or cell
    is cut (an owner is cut short on purpose, whole in its tooltip)."""
    assert page.is_visible("#nav-sidebar")
    assert page.viewport_size == {"width": SCREEN_WIDTH, "height": SCREEN_HEIGHT}
    overflow = page.evaluate(
        "() => { const r = document.querySelector('.results');"
        " return r.scrollWidth - r.clientWidth; }"
    )
    assert overflow <= 0, f"the list scrolls sideways by {overflow} px"
    headers = page.locator("#result_list thead th:not(.action-checkbox-column)")
    texts = [text.lower() for text in headers.locator(".text").all_inner_texts()]
    assert texts == HEADERS
    for header in headers.all():
        assert header.is_visible(), header.inner_text()
        box = header.bounding_box()
        assert box["x"] >= 0, header.inner_text()
        assert box["x"] + box["width"] <= SCREEN_WIDTH, header.inner_text()
    cut = page.evaluate(
        "() => [...document.querySelectorAll('#result_list th, #result_list td')]"
        ".filter(cell => cell.scrollWidth > cell.clientWidth)"
        ".map(cell => cell.className + ': ' + cell.innerText)"
    )
    assert cut == [], f"cut short: {cut}"


def test_staff_browse_filter_and_force_release_in_a_browser(
    live_server: Any, staff_and_locks: None, browser_page: Any
) -> None:
    page = browser_page
    changelist = log_in(page, live_server)
    rows = page.locator("#result_list tbody tr")
    assert rows.count() == 6
    assert_fits_the_screen(page)
    screenshot(page, "changelist")

    # Active locks first (soonest expiry first), then delayed, expired, released.
    assert rows.locator("th.field-resource_name").all_inner_texts() == [
        "report:monthly-2026-05",
        "job:42",
        "job:43",
        "deploy:web_eu-1.release",
        "billing.nightly",
        "job:41",
    ]
    time_left = rows.locator("td.field-time_left").all_inner_texts()
    assert re.fullmatch(r"in [34]\d s", time_left[0]), time_left
    assert time_left[1:5] == [
        "in 25 min",
        "in 3 h",
        "delayed, available in 29 min",
        "expired 3 min ago",
    ]
    assert re.fullmatch(r"released (\d s ago|just now)", time_left[5]), time_left
    # Whether each is active: the icon before its time left.
    icons = rows.locator("td.field-time_left img").evaluate_all(
        "icons => icons.map(icon => icon.src.endsWith('icon-yes.svg'))"
    )
    assert icons == [True, True, True, False, False, False]
    assert rows.locator("td.field-waiters").all_inner_texts() == ["0", "1", "2", "0", "0", "0"]
    # An owner cut short to fit is whole in its tooltip.
    owner = rows.nth(1).locator(".dlock-owner")
    assert owner.get_attribute("title") == OWNERS["job:42"]
    assert owner.evaluate("e => e.scrollWidth > e.clientWidth")  # shown cut short

    # Filter: active only.
    page.locator("#changelist-filter").get_by_role("link", name="Active", exact=True).click()
    page.wait_for_url(f"{changelist}?status=active")
    assert rows.count() == 3
    resources = rows.locator("th.field-resource_name").all_inner_texts()
    assert resources == ["report:monthly-2026-05", "job:42", "job:43"]

    # Force-release two of them, through the confirmation page.
    for resource in ("job:42", "report:monthly-2026-05"):
        rows.filter(has_text=resource).locator("input.action-select").check()
    page.select_option("select[name=action]", "force_release_selected")
    page.click("button[name=index]")
    page.wait_for_selector("body.force-release-confirmation")
    assert "Release the 2 selected locks" in page.inner_text("#content")
    screenshot(page, "force-release-confirmation")
    page.click("input[type=submit][value='Yes, release them']")
    page.wait_for_selector("ul.messagelist")
    assert page.inner_text("ul.messagelist") == "Released 2 locks."
    assert rows.locator("th.field-resource_name").all_inner_texts() == ["job:43"]
    screenshot(page, "force-released")


def test_a_locks_page_shows_its_waiters_and_force_releases_it_in_a_browser(
    live_server: Any, staff_and_locks: None, browser_page: Any
) -> None:
    page = browser_page
    log_in(page, live_server)
    # The whole list, for the docs (docs/admin.png is a copy of it).
    path = screenshot(page, "list")
    assert path.stat().st_size > 10_000

    page.locator("#result_list").get_by_role("link", name="job:43", exact=True).click()
    page.wait_for_selector("body.change-form")
    waiters = page.locator("#waiters table")
    assert [text.lower() for text in waiters.locator("thead th").all_inner_texts()] == [
        "position",
        "label",
        "owner",
        "asks for",
        "will hold it for",
        "woken",
        "ticket expires",
    ]
    cells = [row.locator("td").all_inner_texts() for row in waiters.locator("tbody tr").all()]
    assert [row[:6] for row in cells] == [
        ["1", "web-3 pid 4121", OWNERS_WAITING[0], "exclusive", "1 min", "polls"],
        ["2", "—", OWNERS_WAITING[1], "exclusive", "10 min", "told by the release"],
    ]
    screenshot(page, "lock")

    # The force-release button, its confirmation, and back on the lock's page.
    page.click("a.force-release-link")
    page.wait_for_selector("body.force-release-confirmation")
    assert "Release the lock on job:43, whoever holds it?" in page.inner_text("#content")
    page.click("input[type=submit][value='Yes, release it']")
    page.wait_for_selector("ul.messagelist")
    assert page.inner_text("ul.messagelist") == "Released 1 lock."
    assert page.locator("body.change-form").count() == 1
    assert page.locator("a.force-release-link").count() == 0  # nothing left to release
    assert page.locator("div.field-status div.readonly").inner_text() == "released"
    screenshot(page, "lock-released")
