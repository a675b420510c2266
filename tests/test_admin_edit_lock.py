"""Edit-locks in the admin (``EditLockMixin``), the server side, with Django's
test client: tests/testapp's ``ProductAdmin`` mixes it in. The browser side
(renewal, take-over seen by the first page, release on leaving):
tests/test_admin_edit_lock_browser.py."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse

from django_dlock.admin.edit_locks import _STATE, TOKEN_FIELD, _PageState
from django_dlock.admin.editing import EditLock, owner_for
from django_dlock.models import DistributedLock
from tests.testapp.models import Product
from tests.utils import expire

pytestmark = pytest.mark.django_db


@pytest.fixture
def product() -> Product:
    return Product.objects.create(sku="chair-7", stock=5)


def url(name: str, product: Product) -> str:
    return reverse(f"admin:testapp_product_{name}", args=[product.pk])


def resource(product: Product) -> str:
    return f"admin-edit:testapp.product:{product.pk}"


def staff(username: str, *perms: str, full_name: str = "") -> Client:
    first, _, last = full_name.partition(" ")
    user = User.objects.create_user(username, is_staff=True, first_name=first, last_name=last)
    for perm in perms:
        user.user_permissions.add(Permission.objects.get(codename=f"{perm}_product"))
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def alice() -> Client:
    return staff("alice", "view", "add", "change", full_name="Alice Liddell")


@pytest.fixture
def bob() -> Client:
    return staff("bob", "view", "change")


def holder(product: Product) -> Any:
    holds = DistributedLock.objects.holders(resource(product))
    return holds[0] if holds else None


def form_data(response: Any, **changes: Any) -> dict[str, Any]:
    """The change form as the page would post it (its fields, the page's token)."""
    form = response.context["adminform"].form
    data = {name: form.initial.get(name, "") for name in form.fields}
    data[TOKEN_FIELD] = response.context["edit_lock"]["token"]
    return {**data, **changes}


def messages_of(response: Any) -> list[str]:
    return [str(message) for message in get_messages(response.wsgi_request)]


def test_opening_the_change_page_takes_the_lock_for_the_user(
    alice: Client, product: Product, settings: Any
) -> None:
    settings.DLOCK_ADMIN_EDIT_TTL = 90
    response = alice.get(url("change", product))
    assert response.status_code == 200
    lock = holder(product)
    assert lock.owner == owner_for(User.objects.get(username="alice"))
    assert lock.label == "Alice Liddell"
    assert 89 < (lock.expires_at - lock.acquired_at).total_seconds() <= 90
    page = response.content.decode()
    assert 'name="_save"' in page
    assert "django_dlock/edit_lock.js" in page
    assert f'name="{TOKEN_FIELD}" value="{lock.fencing_token}"' in page
    assert 'data-renew-every="30000"' in page  # a third of the ttl, in ms


def test_the_add_page_takes_no_lock(alice: Client) -> None:
    response = alice.get(reverse("admin:testapp_product_add"))
    assert response.status_code == 200
    assert "edit_lock.js" not in response.content.decode()
    assert not DistributedLock.objects.filter(resource__startswith="admin-edit:").exists()


def test_a_second_editor_sees_who_edits_since_when_read_only(
    alice: Client, bob: Client, product: Product
) -> None:
    alice.get(url("change", product))
    response = bob.get(url("change", product))
    assert response.status_code == 200
    page = response.content.decode()
    assert "Alice Liddell has been editing this page for " in page
    assert "(since " in page
    assert 'name="_save"' not in page and 'name="_continue"' not in page
    assert 'name="stock"' not in page  # every field read-only
    assert "deletelink" not in page
    assert "edit_lock.js" not in page
    assert 'class="dlock-take-over"' in page
    assert holder(product).label == "Alice Liddell"  # still hers


def test_without_the_change_permission_no_lock_and_no_take_over(
    alice: Client, product: Product
) -> None:
    alice.get(url("change", product))
    carol = staff("carol", "view")
    response = carol.get(url("change", product))
    assert response.status_code == 200
    assert 'class="dlock-take-over"' not in response.content.decode()
    assert carol.post(url("edit_lock_take_over", product)).status_code == 403
    assert carol.post(url("edit_lock_renew", product), {"token": "1"}).status_code == 403
    assert holder(product).label == "Alice Liddell"


def test_take_over_moves_the_lock_and_the_first_page_learns_it_lost(
    alice: Client, bob: Client, product: Product
) -> None:
    first = alice.get(url("change", product))
    token = first.context["edit_lock"]["token"]
    renew = url("edit_lock_renew", product)
    assert alice.post(renew, {"token": token}).json() == {"state": "held"}

    response = bob.post(url("edit_lock_take_over", product))
    assert response.status_code == 302
    assert response["Location"] == url("change", product)
    lock = holder(product)
    assert lock.owner == owner_for(User.objects.get(username="bob"))
    assert lock.label == "bob"
    assert lock.fencing_token > token
    page = bob.get(url("change", product)).content.decode()
    assert 'name="_save"' in page  # bob edits now

    answer = alice.post(renew, {"token": token}).json()
    assert answer["state"] == "lost"
    assert answer["message"].startswith("bob took over editing at ")


def test_a_save_without_the_lock_is_refused_and_writes_nothing(
    alice: Client, bob: Client, product: Product
) -> None:
    first = alice.get(url("change", product))
    bob.post(url("edit_lock_take_over", product))
    response = alice.post(url("change", product), form_data(first, stock=99))
    assert response.status_code == 302
    assert response["Location"] == url("change", product)
    [message] = messages_of(response)
    assert message.startswith("Not saved: bob took over editing at ")
    product.refresh_from_db()
    assert product.stock == 5
    assert holder(product).label == "bob"


def test_a_save_with_a_page_of_an_earlier_lock_is_refused(alice: Client, product: Product) -> None:
    """A page whose lock expired cannot save, even when its user holds the lock
    again from another page (a larger fencing token)."""
    stale = alice.get(url("change", product))
    expire(resource(product))
    alice.get(url("change", product))
    response = alice.post(url("change", product), form_data(stale, stock=99))
    [message] = messages_of(response)
    assert message.startswith("Not saved: you opened this page again at ")
    product.refresh_from_db()
    assert product.stock == 5


def test_a_save_after_the_lock_ran_out_is_refused(alice: Client, product: Product) -> None:
    page = alice.get(url("change", product))
    expire(resource(product))
    response = alice.post(url("change", product), form_data(page, stock=99))
    assert messages_of(response) == ["Not saved: your edit-lock ran out. Nothing was changed."]
    product.refresh_from_db()
    assert product.stock == 5


def test_a_save_without_a_token_is_refused(alice: Client, product: Product) -> None:
    page = alice.get(url("change", product))
    data = form_data(page, stock=99)
    del data[TOKEN_FIELD]
    alice.post(url("change", product), data)
    product.refresh_from_db()
    assert product.stock == 5


def test_a_save_with_the_lock_writes_and_releases_it(alice: Client, product: Product) -> None:
    page = alice.get(url("change", product))
    response = alice.post(url("change", product), form_data(page, stock=99))
    assert response.status_code == 302
    product.refresh_from_db()
    assert product.stock == 99
    assert holder(product) is None


def test_a_form_with_errors_keeps_the_lock(alice: Client, product: Product) -> None:
    page = alice.get(url("change", product))
    token = page.context["edit_lock"]["token"]
    response = alice.post(url("change", product), form_data(page, stock=-1))
    assert response.status_code == 200
    assert response.context["edit_lock"]["token"] == token
    assert holder(product).fencing_token == token


def test_renew_extends_and_release_frees_only_the_pages_own_lock(
    alice: Client, product: Product, settings: Any
) -> None:
    settings.DLOCK_ADMIN_EDIT_TTL = 30
    token = alice.get(url("change", product)).context["edit_lock"]["token"]
    before = holder(product).expires_at
    assert alice.post(url("edit_lock_renew", product), {"token": token}).json() == {"state": "held"}
    assert holder(product).expires_at > before
    release = url("edit_lock_release", product)
    assert alice.post(release, {"token": token + 1}).json() == {"released": False}
    assert holder(product) is not None
    assert alice.post(release, {"token": token}).json() == {"released": True}
    assert holder(product) is None
    answer = alice.post(url("edit_lock_renew", product), {"token": token}).json()
    assert answer["state"] == "lost"
    assert answer["message"].startswith("Your edit-lock ran out")


def test_the_pages_requests_are_post_only_staff_only_and_csrf_protected(
    alice: Client, product: Product
) -> None:
    token = alice.get(url("change", product)).context["edit_lock"]["token"]
    for name in ("edit_lock_renew", "edit_lock_release", "edit_lock_take_over"):
        assert alice.get(url(name, product)).status_code == 405
        anonymous = Client().post(url(name, product), {"token": token})
        assert anonymous.status_code == 302  # to the admin's login
        assert "/admin/login/" in anonymous["Location"]
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(User.objects.get(username="alice"))
    for name in ("edit_lock_renew", "edit_lock_release", "edit_lock_take_over"):
        assert strict.post(url(name, product), {"token": token}).status_code == 403
    assert holder(product).label == "Alice Liddell"


def test_the_page_extends_the_change_form_the_admin_would_use(
    alice: Client, product: Product, monkeypatch: Any
) -> None:
    from tests.testapp.admin import ProductAdmin

    monkeypatch.setattr(ProductAdmin, "change_form_template", "admin/change_form_object_tools.html")
    response = alice.get(url("change", product))
    assert response.context["dlock_parent_template"].origin.template_name == (
        "admin/change_form_object_tools.html"
    )
    monkeypatch.undo()
    response = alice.get(url("change", product))
    assert (
        response.context["dlock_parent_template"].origin.template_name == "admin/change_form.html"
    )


def test_a_read_only_page_makes_its_inlines_read_only(
    alice: Client, bob: Client, product: Product, monkeypatch: Any, rf: Any
) -> None:
    """Django renders an inline read-only when its permissions say so (as for a
    view-only user): the mixin makes them say so on a page another user's lock
    makes read-only."""
    from django.contrib import admin

    from tests.testapp.models import Counter

    class CounterInline(admin.TabularInline[Counter, Product]):
        model = Counter

    product_admin = admin.site._registry[Product]
    monkeypatch.setattr(product_admin, "inlines", [CounterInline])
    # Alice's page holds the lock (token 1); Bob's is read-only (no token).
    for username, token, allowed in [("alice", 1, True), ("bob", None, False)]:
        request = rf.get(url("change", product))
        request.user = User.objects.get(username=username)
        request.user.is_superuser = True  # every permission the inline asks for
        setattr(request, _STATE, _PageState(product.pk, token, None))
        [inline] = product_admin.get_inline_instances(request, product)
        assert inline.has_add_permission(request, product) is allowed
        assert inline.has_change_permission(request, product) is allowed
        assert inline.has_delete_permission(request, product) is allowed


def test_a_take_over_after_the_check_rolls_the_save_back(
    alice: Client, product: Product, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The save runs inside ``held.atomic()`` of the edit-lock: a take-over that
    lands after the page's lock was checked (here, right after ``keep``) is seen
    by the save's first statement, and nothing is written."""
    page = alice.get(url("change", product))
    keep = EditLock.keep

    def keep_then_lose(self: EditLock, token: int) -> Any:
        hold = keep(self, token)
        DistributedLock.objects.force_release(self.resource)
        DistributedLock.objects.acquire(self.resource, "someone-else", 60, label="carol")
        return hold

    monkeypatch.setattr(EditLock, "keep", keep_then_lose)
    response = alice.post(url("change", product), form_data(page, stock=99))
    [message] = messages_of(response)
    assert message.startswith("Not saved: carol took over editing at ")
    product.refresh_from_db()
    assert product.stock == 5
