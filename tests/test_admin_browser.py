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
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User

from django_dlock.models import DistributedLock
from tests.utils import make_lock

pytestmark = pytest.mark.django_db(transaction=True)

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
            viewport={"width": 1400, "height": 560},
        )
        try:
            page = context.pages[0] if context.pages else context.new_page()
            page.set_default_timeout(20_000)
            yield page
        finally:
            context.close()


@pytest.fixture
def staff_and_locks() -> None:
    """A staff user and locks of every kind, made before the browser starts:
    Playwright's sync API runs an event loop in this thread, where Django refuses
    ORM calls (so the test requests this fixture before ``browser_page``)."""
    User.objects.create_user("operator", password=PASSWORD, is_staff=True, is_superuser=True)
    make_lock("report:monthly-2026-05", "cron-host-1", expires_in=42.5)
    make_lock("job:42", "worker-7f3a9c", expires_in=25 * 60 + 30)
    make_lock("job:43", "worker-1b2c3d", expires_in=3 * 3600 + 60)
    make_lock("billing.nightly", "worker-0e4d11", expires_in=-(3 * 60 + 5))
    make_lock("job:41", "worker-7f3a9c")
    DistributedLock.objects.release("job:41", owner="worker-7f3a9c")
    # Tokens as a lock table that has been in use a while shows them.
    for resource, token in [("report:monthly-2026-05", 12), ("job:42", 7), ("billing.nightly", 41)]:
        DistributedLock.objects.filter(resource=resource).update(fencing_token=token)


def screenshot(page: Any, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"admin-{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def test_staff_filters_and_force_releases_in_a_browser(
    live_server: Any, staff_and_locks: None, browser_page: Any
) -> None:
    page = browser_page
    changelist = f"{live_server.url}/admin/django_dlock/distributedlock/"

    # Log in as staff.
    page.goto(f"{live_server.url}/admin/login/?next=/admin/django_dlock/distributedlock/")
    page.fill("input[name=username]", "operator")
    page.fill("input[name=password]", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(changelist)
    page.click("#toggle-nav-sidebar")  # room for every column
    rows = page.locator("#result_list tbody tr")
    assert rows.count() == 5
    screenshot(page, "changelist")
    time_left = rows.locator("td.field-time_left").all_inner_texts()
    assert len([text for text in time_left if re.fullmatch(r"in [34]\d s", text)]) == 1
    assert "expired 3 min ago" in time_left
    assert (
        len([text for text in time_left if re.fullmatch(r"released (\d s ago|just now)", text)])
        == 1
    )

    # Filter: active only.
    page.locator("#changelist-filter").get_by_role("link", name="Active", exact=True).click()
    page.wait_for_url(f"{changelist}?status=active")
    assert rows.count() == 3
    resources = rows.locator("th.field-resource").all_inner_texts()
    assert sorted(resources) == ["job:42", "job:43", "report:monthly-2026-05"]

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
    assert rows.locator("th.field-resource").all_inner_texts() == ["job:43"]
    screenshot(page, "force-released")

    # The whole list again, for the README.
    page.goto(changelist)
    assert rows.count() == 5
    path = screenshot(page, "list")
    assert path.stat().st_size > 10_000
