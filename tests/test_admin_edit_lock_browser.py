"""Edit-locks in the admin in a real browser: two users, each in a browser
context of their own (Chromium as tests/test_admin_browser.py launches it), on
tests/testapp's ``ProductAdmin`` (``EditLockMixin``), with a 3 s ttl (the page
renews every second).

The first editor's page renews its lock; the second sees it read-only with a
take-over button (docs/admin-edit-lock.png is its screenshot); the take-over
turns the first page read-only within one renewal, its typed input kept; a save
forced from that page is refused and writes nothing; leaving a page releases
its lock.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import pytest
from django.contrib.auth.models import User
from django.db import connections

from django_dlock.models import DistributedLock
from tests.test_admin_browser import (
    CHROMIUM,
    CHROMIUM_FLAGS,
    PASSWORD,
    SCREEN_HEIGHT,
    SCREEN_WIDTH,
    screenshot,
)
from tests.testapp.models import Product

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.vendor_independent]

TTL = 3  # renewed every second
_T = TypeVar("_T")


def orm(function: Callable[[], _T]) -> _T:
    """``function()`` in a thread of its own: Playwright's sync API runs an event
    loop in the test's thread, where Django refuses ORM calls."""

    def run() -> _T:
        try:
            return function()
        finally:
            connections.close_all()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(run).result()


@pytest.fixture
def product(settings: Any) -> Product:
    """Two editors and a product, made before the browser starts."""
    settings.DLOCK_ADMIN_EDIT_TTL = TTL
    User.objects.create_user(
        "alice", password=PASSWORD, is_staff=True, is_superuser=True, first_name="Alice"
    )
    User.objects.create_user(
        "bob", password=PASSWORD, is_staff=True, is_superuser=True, first_name="Bob"
    )
    return Product.objects.create(sku="chair-7", stock=5)


@pytest.fixture
def two_pages(product: Product) -> Iterator[tuple[Any, Any]]:
    """A page in each of two browser contexts (two users' browsers) of one Chromium."""
    if os.environ.get("DLOCK_SKIP_BROWSER") == "1":
        pytest.skip("DLOCK_SKIP_BROWSER=1")
    if not shutil.which(CHROMIUM):
        pytest.fail(f"No Chromium at {CHROMIUM} (see tests/test_admin_browser.py).")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS
        )
        try:
            viewport: Any = {"width": SCREEN_WIDTH, "height": SCREEN_HEIGHT}
            pages = [browser.new_context(viewport=viewport).new_page() for _ in range(2)]
            for page in pages:
                page.set_default_timeout(20_000)
            yield pages[0], pages[1]
        finally:
            browser.close()


def log_in(page: Any, live_server: Any, username: str, path: str) -> None:
    page.goto(f"{live_server.url}/admin/login/?next={path}")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(f"{live_server.url}{path}")


def lock_of(product: Product) -> Any:
    """The edit-lock's (label, expires_at, fencing token), or None when nobody holds it."""
    holds = orm(lambda: DistributedLock.objects.holders(f"admin-edit:testapp.product:{product.pk}"))
    return (holds[0].label, holds[0].expires_at, holds[0].fencing_token) if holds else None


def until(condition: Callable[[], Any], seconds: float, what: str) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"not within {seconds} s: {what}")


def stock_of(product: Product) -> int:
    return orm(lambda: Product.objects.get(pk=product.pk).stock)


def test_two_editors_in_a_browser(live_server: Any, product: Product, two_pages: Any) -> None:
    alice, bob = two_pages
    change = f"/admin/testapp/product/{product.pk}/change/"

    # Alice opens the page: she holds the lock, and her page renews it.
    log_in(alice, live_server, "alice", change)
    assert alice.locator("input[name=_save]").is_enabled()
    label, expires_at, token = lock_of(product)
    assert label == "Alice"
    until(lambda: lock_of(product)[1] > expires_at, TTL, "the page renewed its lock")
    time.sleep(TTL)  # past the first ttl: only renewals keep it
    assert lock_of(product)[0] == "Alice"

    # Bob sees who edits since when, read-only, and a take-over button.
    log_in(bob, live_server, "bob", change)
    notice = bob.locator(".dlock-edit-lock").inner_text()
    assert notice.startswith("Alice has been editing this page for "), notice
    assert "(since " in notice
    assert bob.locator("input[name=stock]").count() == 0
    assert bob.locator("input[name=_save]").count() == 0
    assert bob.locator("div.field-stock div.readonly").inner_text() == "5"
    assert bob.evaluate("document.documentElement.scrollWidth") <= SCREEN_WIDTH
    shot = screenshot(bob, "edit-lock-read-only")
    assert shot.stat().st_size > 10_000

    # Alice types; Bob takes over; Alice's page turns read-only within a renewal.
    alice.fill("input[name=stock]", "99")
    bob.click("input.dlock-take-over")
    bob.wait_for_selector("ul.messagelist li.success")
    took_over = time.monotonic()
    assert bob.locator("input[name=stock]").is_editable()
    assert lock_of(product)[0] == "Bob"
    alice.wait_for_selector(".dlock-edit-lost-message", timeout=(TTL / 3 + 2) * 1000)
    assert time.monotonic() - took_over < TTL / 3 + 1.5
    assert alice.inner_text(".dlock-edit-lost-message").startswith("Bob took over editing at")
    stock = alice.locator("input[name=stock]")
    assert stock.input_value() == "99"  # kept, to copy
    assert not stock.is_editable()
    assert alice.locator("input[name=_save]").is_disabled()
    assert not alice.locator(".submit-row a.deletelink").is_visible()
    screenshot(alice, "edit-lock-lost")

    # A save forced from Alice's page is refused, and nothing is written.
    alice.evaluate("HTMLFormElement.prototype.submit.call(document.getElementById('product_form'))")
    alice.wait_for_url(f"{live_server.url}{change}")
    alice.wait_for_selector("ul.messagelist li.error")
    assert alice.inner_text("ul.messagelist li.error").startswith("Not saved: Bob took over")
    assert stock_of(product) == 5
    assert alice.locator("input[name=_save]").count() == 0  # read-only: Bob edits

    # Bob saves: written, and the lock released.
    bob.fill("input[name=stock]", "7")
    bob.click("input[name=_save]")
    bob.wait_for_url(f"{live_server.url}/admin/testapp/product/")
    assert stock_of(product) == 7
    assert lock_of(product) is None

    # Alice opens the page again, then leaves it: released at once, not at expiry.
    alice.goto(f"{live_server.url}{change}")
    assert lock_of(product)[0] == "Alice"
    alice.goto(f"{live_server.url}/admin/")
    left = time.monotonic()
    until(lambda: lock_of(product) is None, TTL, "the page released its lock when left")
    assert time.monotonic() - left < 1.5  # its expiry was at least 2 s away
