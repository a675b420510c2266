"""A lock's page in the admin shows every hold of the resource, and can
force-release one holder or all (CONTRACT.md, "Lock kinds")."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from django_dlock.models import DistributedLock
from django_dlock.rules import SHARED_HOLDERS

pytestmark = pytest.mark.django_db(transaction=True)

Locks = DistributedLock.objects


def change_url(lock: DistributedLock) -> str:
    return reverse("admin:django_dlock_distributedlock_change", args=[lock.pk])


def force_release_url(lock: DistributedLock) -> str:
    return reverse("admin:django_dlock_distributedlock_force_release", args=[lock.pk])


def holders_on_page(response: Any) -> list[dict[str, str]]:
    table = response.context["holders"]
    return [dict(zip(table.headers, row.cells, strict=True)) for row in table.rows]


def readers(resource: str) -> DistributedLock:
    Locks.acquire(resource, owner="r1", ttl=30, shared=True, label="reader one")
    Locks.acquire(resource, owner="r2", ttl=30, shared=True, label="reader two")
    return DistributedLock.objects.get(resource=resource)


def test_a_locks_page_lists_every_holder_oldest_first(admin_client: Client) -> None:
    header = readers("doc:1")
    page = admin_client.get(change_url(header))
    rows = holders_on_page(page)
    assert [(row["label"], row["owner"], row["kind"]) for row in rows] == [
        ("reader one", "r1", "shared"),
        ("reader two", "r2", "shared"),
    ]
    assert page.content.decode().count('class="force-release-holder"') == 2


def test_owners_of_holders_are_hidden_from_view_only_staff(client: Client) -> None:
    header = readers("doc:2")
    user = User.objects.create_user("viewer", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_distributedlock"))
    client.force_login(user)
    rows = holders_on_page(client.get(change_url(header)))
    assert [sorted(row) for row in rows] == [
        ["fencing token", "holds", "kind", "label", "time left"]
    ] * 2
    assert "force-release-holder" not in client.get(change_url(header)).content.decode()


def test_force_release_of_one_holder_keeps_the_others(admin_client: Client) -> None:
    header = readers("doc:3")
    done = admin_client.post(force_release_url(header), {"holder": "r1"}, follow=True)
    assert done.redirect_chain == [(change_url(header), 302)]
    assert [str(message) for message in done.context["messages"]] == ["Released one holder."]
    assert [hold.owner for hold in Locks.holders("doc:3")] == ["r2"]
    admin_client.post(force_release_url(header))  # all of them
    assert Locks.holders("doc:3") == []


@pytest.mark.parametrize("kind", ["readers", "semaphore"])
def test_the_force_release_confirmation_shows_shared_holders_as_the_list_does(
    admin_client: Client, kind: str
) -> None:
    if kind == "readers":
        header = readers("doc:4")
    else:
        Locks.acquire("doc:4", owner="p1", ttl=30, limit=3)
        Locks.acquire("doc:4", owner="p2", ttl=30, limit=3)
        header = DistributedLock.objects.get(resource="doc:4")

    from_page = admin_client.get(force_release_url(header)).content.decode()
    from_action = admin_client.post(
        reverse("admin:django_dlock_distributedlock_changelist"),
        {"action": "force_release_selected", "_selected_action": [header.pk]},
    ).content.decode()

    for html in (from_page, from_action):
        assert SHARED_HOLDERS not in html  # an internal value, never shown
        assert "<td>shared holders</td>" in html
