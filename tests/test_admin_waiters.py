"""A lock's page in the admin: its fields, its queued ``lock()`` waiters, and
a force-release button; the list's count of waiters per resource; owners shown
only to users who may see them (the rule of the HTTP API)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User
from django.db.models import DurationField, Value
from django.test import Client
from django.urls import reverse

from django_dlock.admin.waiters import SHOWN_WAITERS
from django_dlock.models import DistributedLock, LockWaiter
from django_dlock.rules.clock import DatabaseNow
from tests.utils import (
    database_settings,
    make_lock,
    run_in_processes,
    run_in_thread,
    wait_for,
)
from tests.workers_admin import wait_for_the_lock

CHANGELIST = reverse("admin:django_dlock_distributedlock_changelist")


def change_url(lock: DistributedLock) -> str:
    return reverse("admin:django_dlock_distributedlock_change", args=[lock.pk])


def force_release_url(lock: DistributedLock) -> str:
    return reverse("admin:django_dlock_distributedlock_force_release", args=[lock.pk])


def queue(
    resource: str,
    owner: str,
    *,
    alive_for: float = 5,
    ttl: float | None = 30,
    **fields: Any,
) -> None:
    """A waiter's ticket, live for ``alive_for`` seconds by the database's clock
    (negative: a crashed waiter's, expired that long ago)."""
    waiter = LockWaiter.objects.create(
        resource=resource,
        owner=owner,
        expires_at=DatabaseNow(),
        ttl=None if ttl is None else timedelta(seconds=ttl),
        **fields,
    )
    LockWaiter.objects.filter(pk=waiter.pk).update(
        expires_at=DatabaseNow() + Value(timedelta(seconds=alive_for), output_field=DurationField())
    )


@pytest.fixture
def viewer(client: Client) -> Client:
    """A staff user who may view locks and nothing more: no owners for them."""
    user = User.objects.create_user("viewer", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_distributedlock"))
    client.force_login(user)
    return client


def waiters_on_page(response: Any) -> list[dict[str, str]]:
    """The rows of the page's queue, each by its column headers."""
    table = response.context["waiters"]
    return [dict(zip(table.headers, row, strict=True)) for row in table.rows]


# -- the list ------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_list_counts_live_waiters_per_resource(admin_client: Client) -> None:
    make_lock("job:busy")
    make_lock("job:quiet")
    for owner in ("w1", "w2", "w3"):
        queue("job:busy", owner)
    queue("job:busy", "crashed", alive_for=-5)  # no longer counts
    queue("job:quiet", "crashed", alive_for=-1)

    response = admin_client.get(CHANGELIST)

    counts = {lock.resource: lock.waiter_count for lock in response.context["cl"].result_list}
    assert counts == {"job:busy": 3, "job:quiet": 0}
    index = list(response.context["cl"].list_display).index("waiters")
    most_first = admin_client.get(CHANGELIST, {"o": f"-{index}"}).context["cl"].result_list
    assert [lock.resource for lock in most_first] == ["job:busy", "job:quiet"]


@pytest.mark.django_db
def test_view_only_staff_see_no_owners_and_cannot_search_by_them(viewer: Client) -> None:
    make_lock("job:1", "secret-owner-token")
    response = viewer.get(CHANGELIST)
    assert "owner_token" not in response.context["cl"].list_display
    assert "owner_token" not in response.context["cl"].sortable_by
    assert b"secret-owner-token" not in response.content
    assert [
        lock.resource for lock in viewer.get(CHANGELIST, {"q": "job"}).context["cl"].result_list
    ] == ["job:1"]
    assert list(viewer.get(CHANGELIST, {"q": "secret-owner"}).context["cl"].result_list) == []


# -- a lock's page ----------------------------------------------------------------------


@pytest.mark.django_db
def test_a_locks_page_lists_its_queue_in_order(admin_client: Client) -> None:
    lock = make_lock("job:busy")
    queue("job:busy", "first", ttl=30, label="web-3 pid 4121")
    queue("job:busy", "crashed", alive_for=-5)
    queue("job:busy", "second", ttl=7200, alive_for=3, mode="shared")
    queue("job:busy", "third", ttl=None, mode="shared", limit=4)
    queue("job:other", "elsewhere")

    response = admin_client.get(change_url(lock))

    assert response.status_code == 200
    rows = waiters_on_page(response)
    assert [(row["position"], row["owner"]) for row in rows] == [
        ("1", "first"),
        ("2", "second"),
        ("3", "third"),
    ]
    assert [row["will hold it for"] for row in rows] == ["30 s", "2 h", "—"]
    assert [row["label"] for row in rows] == ["web-3 pid 4121", "—", "—"]
    assert [row["asks for"] for row in rows] == ["exclusive", "shared", "semaphore of 4"]
    assert rows[1]["ticket expires"] in ("in 2 s", "in 3 s")
    html = response.content.decode()
    assert 'id="waiters"' in html and "second" in html and "crashed" not in html


@pytest.mark.django_db
def test_a_locks_page_hides_owners_from_who_may_not_see_them(viewer: Client) -> None:
    lock = make_lock("job:busy", "secret-holder")
    queue("job:busy", "secret-waiter")

    response = viewer.get(change_url(lock))

    assert response.status_code == 200
    rows = waiters_on_page(response)
    assert [row["position"] for row in rows] == ["1"]
    assert "owner" not in rows[0]
    assert b"secret-holder" not in response.content
    assert b"secret-waiter" not in response.content


@pytest.mark.django_db
def test_a_long_queue_shows_its_head_and_counts_the_rest(admin_client: Client) -> None:
    lock = make_lock("job:busy")
    for n in range(SHOWN_WAITERS + 5):
        queue("job:busy", f"w{n}")
    response = admin_client.get(change_url(lock))
    assert len(response.context["waiters"].rows) == SHOWN_WAITERS
    assert "and 5 more waiters behind them" in response.content.decode()


@pytest.mark.django_db
def test_no_waiters_says_so(admin_client: Client) -> None:
    response = admin_client.get(change_url(make_lock("job:quiet")))
    assert "No process waits for this lock." in response.content.decode()


# -- force-release from a lock's page --------------------------------------------------


@pytest.mark.django_db
def test_force_release_button_asks_then_releases_and_returns_to_the_page(
    admin_client: Client,
) -> None:
    lock = make_lock("job:1", "worker-a")
    page = admin_client.get(change_url(lock))
    assert force_release_url(lock) in page.content.decode()

    confirmation = admin_client.get(force_release_url(lock))
    assert confirmation.status_code == 200
    html = confirmation.content.decode()
    assert "Release the lock on job:1, whoever holds it?" in html
    assert DistributedLock.objects.active().count() == 1  # nothing released yet

    done = admin_client.post(force_release_url(lock), follow=True)

    assert done.redirect_chain == [(change_url(lock), 302)]
    assert [str(message) for message in done.context["messages"]] == ["Released 1 lock."]
    assert not DistributedLock.objects.active().exists()
    assert force_release_url(lock) not in done.content.decode()  # nothing left to release
    entry = LogEntry.objects.get()
    assert (entry.object_repr, entry.get_change_message()) == ("job:1", "Force-released.")
    again = DistributedLock.objects.acquire("job:1", owner="worker-z")
    assert again is not None and again.fencing_token > lock.fencing_token


@pytest.mark.django_db
def test_no_button_for_an_expired_lock_nor_for_view_only_staff(
    admin_client: Client, viewer: Client
) -> None:
    expired = make_lock("job:expired", expires_in=-5)
    active = make_lock("job:active")
    assert force_release_url(expired) not in admin_client.get(change_url(expired)).content.decode()
    assert force_release_url(active) not in viewer.get(change_url(active)).content.decode()
    assert viewer.get(force_release_url(active)).status_code == 403
    assert viewer.post(force_release_url(active)).status_code == 403
    assert DistributedLock.objects.active().count() == 1


@pytest.mark.django_db
def test_force_release_of_a_purged_lock_goes_back_to_the_list(admin_client: Client) -> None:
    lock = make_lock("job:gone", expires_in=-5)
    url = force_release_url(lock)
    DistributedLock.objects.purge_expired()
    done = admin_client.post(url, follow=True)
    assert done.redirect_chain == [(CHANGELIST, 302)]
    assert [str(message) for message in done.context["messages"]] == ["There is no such lock."]


@pytest.mark.django_db
def test_force_release_from_the_page_works_under_atomic_requests(
    admin_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django.db import connection

    lock = make_lock("job:1")
    monkeypatch.setitem(connection.settings_dict, "ATOMIC_REQUESTS", True)
    admin_client.post(force_release_url(lock))
    assert not DistributedLock.objects.active().exists()


# -- real waiters ---------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_page_shows_processes_waiting_in_lock(admin_client: Client) -> None:
    """Two processes wait in ``lock()``; the page shows both queued, the list
    counts them, and they get the lock once it is released."""
    lock = make_lock("job:queued", "holder", expires_in=60)
    db = database_settings()
    waiting = run_in_thread(
        lambda outcome: run_in_processes(
            wait_for_the_lock,
            [(db, "job:queued", "waiter-1"), (db, "job:queued", "waiter-2")],
        )
    )

    def queued() -> list[dict[str, str]]:
        rows = waiters_on_page(admin_client.get(change_url(lock)))
        return rows if len(rows) == 2 else []

    rows = wait_for(queued, seconds=60, what="two processes queued in lock()")
    assert [row["position"] for row in rows] == ["1", "2"]
    assert {row["owner"] for row in rows} == {"waiter-1", "waiter-2"}
    listed = admin_client.get(CHANGELIST).context["cl"].result_list
    assert [(lock.resource, lock.waiter_count) for lock in listed] == [("job:queued", 2)]

    assert DistributedLock.objects.release("job:queued", owner="holder").name == "RELEASED"
    waiting["thread"].join(timeout=120)
    assert "error" not in waiting, waiting.get("error")
    tokens = waiting["result"]
    assert len(set(tokens)) == 2 and min(tokens) > lock.fencing_token
    assert waiters_on_page(admin_client.get(change_url(lock))) == []


@pytest.mark.django_db
def test_each_kind_of_lock_says_what_it_is(admin_client: Client) -> None:
    manager = DistributedLock.objects
    assert manager.acquire("doc:7", owner="reader-1", ttl=30, shared=True)
    assert manager.acquire("doc:7", owner="reader-2", ttl=30, shared=True)
    assert manager.acquire("gpu", owner="job-1", ttl=30, limit=4)
    assert manager.acquire("r", owner="w1", ttl=30, reentrant=True)
    assert manager.acquire("r", owner="w1", ttl=30, reentrant=True)
    assert manager.acquire("plain", owner="w2", ttl=30, label="web-3 pid 4121")

    response = admin_client.get(CHANGELIST)

    owners = {
        lock.resource: admin_client_display(response, lock, "owner_token")
        for lock in response.context["cl"].result_list
    }
    assert owners["doc:7"] == owners["gpu"] == "shared holders"  # each holder has its own
    assert "w2" in owners["plain"]
    kinds = {
        resource: admin_client.get(change_url(manager.get(resource=resource))).context["adminform"]
        for resource in ("doc:7", "gpu", "r", "plain")
    }
    shown = {
        resource: {
            field.field["name"]: field.contents()
            for fieldset in form
            for line in fieldset
            for field in line
        }
        for resource, form in kinds.items()
    }
    assert {resource: fields["kind"] for resource, fields in shown.items()} == {
        "doc:7": "shared",
        "gpu": "semaphore of 4",
        "r": "exclusive, held 2 times",
        "plain": "exclusive",
    }
    assert shown["plain"]["label"] == "web-3 pid 4121"


def admin_client_display(response: Any, lock: DistributedLock, name: str) -> str:
    """What the list's column ``name`` shows for ``lock``."""
    model_admin = response.context["cl"].model_admin
    return str(getattr(model_admin, name)(lock))
