"""The admin: a read-only list of locks by the database's clock, force-release
with a confirmation page, and purge of expired locks."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any
from unittest import mock

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.admin.templatetags.admin_list import result_headers
from django.contrib.admin.templatetags.admin_list import results as admin_list_results
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils.formats import localize
from django.utils.html import strip_tags
from django.utils.timezone import localtime

from django_dlock.humanize import duration_in_words, time_left_in_words
from django_dlock.models import DistributedLock, FencingFloor
from tests.utils import make_delayed_lock, make_lock

if TYPE_CHECKING:
    from django_dlock.admin.columns import ListedLock

pytestmark = pytest.mark.django_db

CHANGELIST = reverse("admin:django_dlock_distributedlock_changelist")
PURGE = reverse("admin:django_dlock_distributedlock_purge")


def results(response: Any) -> list[ListedLock]:
    return list(response.context["cl"].result_list)


def resources(response: Any) -> list[str]:
    return [lock.resource for lock in results(response)]


def column(response: Any, name: str) -> int:
    """The changelist's ``o=`` index of the column ``name``."""
    return list(response.context["cl"].list_display).index(name)


@pytest.fixture
def viewer(client: Client) -> Client:
    """A staff user who may view locks and nothing more."""
    user = User.objects.create_user("viewer", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_distributedlock"))
    client.force_login(user)
    return client


# -- the list -----------------------------------------------------------------


def cell_text(cell: str) -> str:
    """A rendered cell's text (a line break as a space, a <wbr> as nothing)."""
    return strip_tags(cell.replace("<br>", " ").replace("<wbr>", "")).strip()


def active_icons(response: Any) -> dict[str, str]:
    """{resource: "yes" or "no"}: the icon before each lock's time left, which
    says whether it is active."""
    cl = response.context["cl"]
    column = list(cl.list_display).index("time_left")  # the checkbox is the first
    icons = {}
    for row in admin_list_results(cl):
        icon = re.search(r'<img [^>]*src="[^"]*icon-(yes|no)\.svg"', row[column])
        assert icon is not None, row[column]
        icons[cell_text(row[1])] = icon.group(1)
    return icons


def cells(response: Any) -> dict[str, dict[str, str]]:
    """{resource: {column header: the cell's text}} as the changelist renders them."""
    cl = response.context["cl"]
    headers = [str(header["text"]) for header in result_headers(cl)][1:]  # after the checkbox
    rows = {}
    for row in admin_list_results(cl):
        texts = [cell_text(cell) for cell in row][1:]
        rows[texts[0]] = dict(zip(headers, texts, strict=True))
    return rows


def test_changelist_shows_each_column_in_words(admin_client: Client) -> None:
    started = time.monotonic()
    make_lock("job:active", "worker-a", expires_in=42.5)
    make_lock("job:expired", "worker-b", expires_in=-(3 * 60 + 5))
    make_lock("job:released", "worker-c")
    DistributedLock.objects.release("job:released", owner="worker-c")

    response = admin_client.get(CHANGELIST)
    # Rounded down: 42 s, or less by the seconds a loaded machine took to get here.
    shown = int(cells(response)["job:active"]["time left"].split()[1])
    assert 42.5 - (time.monotonic() - started) - 1 < shown <= 42

    assert response.status_code == 200
    # CONTRACT.md's columns and the queued waiters, folded to fit a laptop's
    # screen: active is an icon before the time left, acquired and expires share
    # a column (the admin's template capitalizes each header).
    assert [header["text"] for header in result_headers(response.context["cl"])][1:] == [
        "resource",
        "owner",
        "time left",
        "acquired / expires",
        "fencing token",
        "waiters",
    ]
    locks = {lock.resource: lock for lock in results(response)}
    assert {name: lock.lock_status for name, lock in locks.items()} == {
        "job:active": "active",
        "job:expired": "expired",
        "job:released": "released",
    }
    rows = cells(response)
    for name, left in [("job:active", f"in {shown} s"), ("job:expired", "expired 3 min ago")]:
        lock = locks[name]
        assert rows[name] == {
            "resource": name,
            "owner": lock.owner,
            "time left": left,
            "acquired / expires": f"{localtime(lock.acquired_at):%Y-%m-%d %H:%M:%S} "
            f"{localtime(lock.expires_at):%Y-%m-%d %H:%M:%S}",
            "fencing token": str(lock.fencing_token),
            "waiters": "0",
        }
    assert rows["job:released"]["time left"] == "released just now"
    assert active_icons(response) == {
        "job:active": "yes",
        "job:expired": "no",
        "job:released": "no",
    }
    html = response.content.decode()
    assert '<span class="dlock-owner" title="worker-a">worker-a</span>' in html
    expiry = localize(localtime(locks["job:active"].expires_at))
    assert f'<span title="{expiry}">in {shown} s</span>' in html  # the exact time as its tooltip
    # A time is its date over its time of day, the localized whole in its tooltip.
    iso = locks["job:active"].expires_at.isoformat()
    assert f'<time datetime="{iso}" title="{expiry}">' in html


def test_a_resource_wraps_only_after_its_separators(admin_client: Client) -> None:
    make_lock("report:monthly-2026.05_eu")

    html = admin_client.get(CHANGELIST).content.decode()

    assert ">report:<wbr>monthly-<wbr>2026.<wbr>05_<wbr>eu</a>" in html


def test_the_acquired_expires_column_sorts_by_acquisition(admin_client: Client) -> None:
    make_lock("job:first", expires_in=600)
    second = make_lock("job:second", expires_in=30)
    # Acquired a second later, whatever the clock's resolution.
    DistributedLock.objects.filter(pk=second.pk).update(
        acquired_at=second.acquired_at + timedelta(seconds=1)
    )

    index = column(admin_client.get(CHANGELIST), "acquired_and_expires")

    ascending = resources(admin_client.get(CHANGELIST, {"o": f"{index}"}))
    assert ascending == ["job:first", "job:second"]
    descending = resources(admin_client.get(CHANGELIST, {"o": f"-{index}"}))
    assert descending == ["job:second", "job:first"]


def test_status_and_time_left_follow_the_database_clock_not_the_servers(
    admin_client: Client,
) -> None:
    # Half a minute's margin either way: the page may take a while on a loaded machine.
    make_lock("job:active", expires_in=630)
    make_lock("job:expired", expires_in=-630)
    # This server's clock a day off either way changes nothing.
    for offset in (timedelta(days=1), timedelta(days=-1)):
        skewed = datetime.now(UTC) + offset
        with mock.patch("django.utils.timezone.now", return_value=skewed):
            response = admin_client.get(CHANGELIST)
        rows = {lock.resource: lock.lock_status for lock in results(response)}
        assert rows == {"job:active": "active", "job:expired": "expired"}
        html = response.content.decode()
        assert "in 10 min" in html
        assert "expired 10 min ago" in html


def test_filter_by_status(admin_client: Client) -> None:
    make_lock("job:active")
    make_lock("job:expired", expires_in=-1)
    make_lock("job:released")
    DistributedLock.objects.release("job:released", owner="worker-1")

    active = admin_client.get(CHANGELIST, {"status": "active"})
    expired = admin_client.get(CHANGELIST, {"status": "expired"})

    assert resources(active) == ["job:active"]
    assert sorted(resources(expired)) == ["job:expired", "job:released"]


def test_search_by_resource_and_owner(admin_client: Client) -> None:
    make_lock("report:monthly", "cron-host")
    make_lock("job:42", "worker-7")

    assert resources(admin_client.get(CHANGELIST, {"q": "monthly"})) == ["report:monthly"]
    assert resources(admin_client.get(CHANGELIST, {"q": "worker-7"})) == ["job:42"]
    assert resources(admin_client.get(CHANGELIST, {"q": "nothing-like-it"})) == []


def test_active_locks_first_then_expired_then_released_each_by_expiry(
    admin_client: Client,
) -> None:
    make_lock("released", "worker-r", expires_in=600)
    DistributedLock.objects.release("released", owner="worker-r")
    make_lock("expired-long-ago", expires_in=-3000)
    make_lock("b", expires_in=30)
    make_lock("expired-just-now", expires_in=-30)
    make_lock("a", expires_in=90)

    default = admin_client.get(CHANGELIST)
    assert resources(default) == ["b", "a", "expired-long-ago", "expired-just-now", "released"]
    by_expiry = ["a", "b", "released", "expired-just-now", "expired-long-ago"]
    index = column(default, "time_left")
    assert resources(admin_client.get(CHANGELIST, {"o": f"-{index}"})) == by_expiry


def test_changelist_query_count_does_not_grow_with_the_rows(admin_client: Client) -> None:
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            response = admin_client.get(CHANGELIST, {"status": "active"})
        assert response.status_code == 200
        return len(captured.captured_queries)

    for n in range(10):
        make_lock(f"job:{n}")
    with_10 = queries()
    template = DistributedLock.objects.get(resource="job:0")
    DistributedLock.objects.bulk_create(
        DistributedLock(
            resource=f"bulk:{n}",
            owner=f"owner-{n}",
            acquired_at=template.acquired_at,
            expires_at=template.expires_at,
            fencing_token=1,
        )
        for n in range(990)
    )
    assert DistributedLock.objects.count() == 1000
    assert queries() == with_10


# -- read-only -------------------------------------------------------------------


def test_no_add_no_edit_no_plain_delete(admin_client: Client) -> None:
    lock = make_lock("job:1")
    change_url = reverse("admin:django_dlock_distributedlock_change", args=[lock.pk])

    assert admin_client.get(reverse("admin:django_dlock_distributedlock_add")).status_code == 403
    detail = admin_client.get(change_url)
    assert detail.status_code == 200  # a view-only page
    assert not detail.context["has_change_permission"]
    assert b'name="_save"' not in detail.content
    assert admin_client.post(change_url, {"owner": "intruder"}).status_code == 403
    delete_url = reverse("admin:django_dlock_distributedlock_delete", args=[lock.pk])
    assert admin_client.post(delete_url, {"post": "yes"}).status_code == 403
    actions = [
        name
        for name, _ in admin_client.get(CHANGELIST).context["action_form"].fields["action"].choices
    ]
    assert "delete_selected" not in actions
    assert "force_release_selected" in actions
    lock.refresh_from_db()
    assert lock.owner == "worker-1"


def test_view_only_staff_can_list_but_not_release_or_purge(viewer: Client) -> None:
    make_lock("job:1")
    response = viewer.get(CHANGELIST)

    assert response.status_code == 200
    assert resources(response) == ["job:1"]
    assert PURGE.encode() not in response.content
    assert viewer.get(PURGE).status_code == 403
    assert viewer.post(PURGE).status_code == 403
    lock = DistributedLock.objects.get()
    viewer.post(
        CHANGELIST,
        {"action": "force_release_selected", "_selected_action": [lock.pk], "post": "yes"},
    )
    lock.refresh_from_db()
    assert lock.owner == "worker-1"


# -- force-release ------------------------------------------------------------------


def test_force_release_asks_first_then_releases_and_says_how_many(admin_client: Client) -> None:
    first = make_lock("job:1", "worker-a")
    second = make_lock("job:2", "worker-b")
    make_lock("job:3", "worker-c")
    selected = {"action": "force_release_selected", "_selected_action": [first.pk, second.pk]}

    confirmation = admin_client.post(CHANGELIST, selected)

    assert confirmation.status_code == 200
    assert "admin/django_dlock/distributedlock/force_release_confirmation.html" in [
        template.name for template in confirmation.templates
    ]
    assert [lock.resource for lock in confirmation.context["locks"]] == ["job:1", "job:2"]
    assert DistributedLock.objects.active().count() == 3  # nothing released yet

    done = admin_client.post(CHANGELIST, {**selected, "post": "yes"}, follow=True)

    assert [str(message) for message in done.context["messages"]] == ["Released 2 locks."]
    assert sorted(DistributedLock.objects.active().values_list("resource", flat=True)) == ["job:3"]
    again = DistributedLock.objects.acquire("job:1", owner="worker-z")
    assert again is not None
    assert again.fencing_token > first.fencing_token
    history = LogEntry.objects.order_by("object_repr")
    assert [(entry.object_repr, entry.get_change_message()) for entry in history] == [
        ("job:1", "Force-released."),
        ("job:2", "Force-released."),
    ]


def test_force_release_of_one_lock_and_of_one_not_held(admin_client: Client) -> None:
    held = make_lock("job:held")
    expired = make_lock("job:expired", expires_in=-5)

    done = admin_client.post(
        CHANGELIST,
        {
            "action": "force_release_selected",
            "_selected_action": [held.pk, expired.pk],
            "post": "yes",
        },
        follow=True,
    )

    assert [str(message) for message in done.context["messages"]] == [
        "Released 1 lock.",
        "1 selected lock was not held (expired or released already).",
    ]
    assert not DistributedLock.objects.active().exists()


def test_force_release_works_under_atomic_requests(
    admin_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock = make_lock("job:1")
    monkeypatch.setitem(connection.settings_dict, "ATOMIC_REQUESTS", True)

    done = admin_client.post(
        CHANGELIST,
        {"action": "force_release_selected", "_selected_action": [lock.pk], "post": "yes"},
        follow=True,
    )

    assert [str(message) for message in done.context["messages"]] == ["Released 1 lock."]
    assert not DistributedLock.objects.active().exists()


def test_purge_works_under_atomic_requests(
    admin_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_lock("job:expired", expires_in=-5)
    monkeypatch.setitem(connection.settings_dict, "ATOMIC_REQUESTS", True)

    done = admin_client.post(PURGE, follow=True)

    assert [str(message) for message in done.context["messages"]] == ["Purged 1 expired lock."]
    assert not DistributedLock.objects.exists()


# -- purge ----------------------------------------------------------------------------


def test_purge_asks_first_then_deletes_only_expired_locks(admin_client: Client) -> None:
    make_lock("job:active")
    purged = make_lock("job:expired", expires_in=-5)
    make_lock("job:released")
    DistributedLock.objects.release("job:released", owner="worker-1")

    listing = admin_client.get(CHANGELIST)
    assert PURGE.encode() in listing.content  # the button
    confirmation = admin_client.get(PURGE)
    assert confirmation.status_code == 200
    assert confirmation.context["expired_count"] == 2
    assert DistributedLock.objects.count() == 3

    done = admin_client.post(PURGE, follow=True)

    assert done.redirect_chain == [(CHANGELIST, 302)]
    assert [str(message) for message in done.context["messages"]] == ["Purged 2 expired locks."]
    assert list(DistributedLock.objects.values_list("resource", flat=True)) == ["job:active"]
    # Fencing survives the purge: the purged resource starts above its old token.
    assert FencingFloor.objects.get().value >= purged.fencing_token
    again = DistributedLock.objects.acquire("job:expired", owner="worker-z")
    assert again is not None
    assert again.fencing_token > purged.fencing_token


def test_purge_asks_about_the_locks_it_will_delete_not_those_in_their_lock_delay(
    admin_client: Client,
) -> None:
    make_lock("job:active")
    make_lock("job:expired", expires_in=-5)
    make_lock("job:released")
    DistributedLock.objects.release("job:released", owner="worker-1")
    make_delayed_lock("job:delayed", lock_delay=30 * 60)  # expired, its delay runs

    confirmation = admin_client.get(PURGE)

    # The purge keeps a lock whose lock-delay runs: the question counts it out.
    assert confirmation.context["expired_count"] == 2
    assert "Delete 2 expired or released locks?" in confirmation.content.decode()
    done = admin_client.post(PURGE, follow=True)
    assert [str(message) for message in done.context["messages"]] == ["Purged 2 expired locks."]
    assert sorted(DistributedLock.objects.values_list("resource", flat=True)) == [
        "job:active",
        "job:delayed",
    ]


def test_purge_of_one_lock_says_so_in_the_singular(admin_client: Client) -> None:
    make_lock("job:expired", expires_in=-5)

    done = admin_client.post(PURGE, follow=True)

    assert [str(message) for message in done.context["messages"]] == ["Purged 1 expired lock."]


# -- words ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "words"),
    [
        (0, "0 s"),
        (42.9, "42 s"),
        (59, "59 s"),
        (60, "1 min"),
        (3599, "59 min"),
        (3600, "1 h"),
        (47 * 3600, "47 h"),
        (48 * 3600, "2 d"),
        (30 * 86400, "30 d"),
    ],
)
def test_duration_in_words(seconds: float, words: str) -> None:
    assert duration_in_words(seconds) == words


def test_time_left_in_words() -> None:
    now = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    assert time_left_in_words("active", now + timedelta(seconds=42), now) == "in 42 s"
    assert time_left_in_words("expired", now - timedelta(minutes=3), now) == "expired 3 min ago"
    assert time_left_in_words("released", now - timedelta(hours=2), now) == "released 2 h ago"
    # Expired between the database time read and the list's query.
    assert time_left_in_words("expired", now + timedelta(seconds=0.2), now) == "expired just now"


# -- lock-delay ----------------------------------------------------------------


@pytest.mark.parametrize("force", [False, True], ids=["expired", "force-released"])
def test_a_delayed_lock_has_a_status_of_its_own_and_says_when_it_is_available(
    admin_client: Client, force: bool
) -> None:
    make_lock("job:active")
    make_lock("job:expired", expires_in=-1)
    delayed = make_delayed_lock("job:delayed", lock_delay=30 * 60, force=force)

    response = admin_client.get(CHANGELIST)

    locks = {lock.resource: lock for lock in results(response)}
    assert {name: lock.lock_status for name, lock in locks.items()} == {
        "job:active": "active",
        "job:delayed": "delayed",
        "job:expired": "expired",
    }
    # Between the active and the expired ones.
    assert resources(response) == ["job:active", "job:delayed", "job:expired"]
    row = cells(response)["job:delayed"]
    assert active_icons(response)["job:delayed"] == "no"
    # 30 min from the loss, less the moment it took to read: 29 min (rounded down).
    assert row["time left"] == "delayed, available in 29 min"
    assert localize(localtime(delayed.available_at)) in response.content.decode()
    assert resources(admin_client.get(CHANGELIST, {"status": "delayed"})) == ["job:delayed"]
    assert resources(admin_client.get(CHANGELIST, {"status": "expired"})) == ["job:expired"]
    assert resources(admin_client.get(CHANGELIST, {"status": "active"})) == ["job:active"]

    page = admin_client.get(reverse("admin:django_dlock_distributedlock_change", args=[delayed.pk]))
    fields = {
        line.field["name"]: str(line.contents())
        for fieldset in page.context["adminform"]
        for fieldline in fieldset
        for line in fieldline
    }
    assert fields["status"] == "delayed"
    assert fields["lock_delay_in_words"] == "30 min"
    assert "delayed, available in 29 min" in fields["time_left"]
    # Nothing to force-release: nobody holds it.
    assert page.context["force_release_url"] is None


def test_a_locks_pages_show_its_times_to_the_second_as_the_list_does(
    admin_client: Client,
) -> None:
    lock = make_lock("job:short", expires_in=1)  # acquired and expiring in the same minute
    times = [
        f"{localtime(moment):%Y-%m-%d %H:%M:%S}" for moment in (lock.acquired_at, lock.expires_at)
    ]

    page = admin_client.get(reverse("admin:django_dlock_distributedlock_change", args=[lock.pk]))
    confirmation = admin_client.get(
        reverse("admin:django_dlock_distributedlock_force_release", args=[lock.pk])
    )

    page_text = cell_text(page.content.decode())
    assert all(time in page_text for time in times), times
    assert times[1] in cell_text(confirmation.content.decode())


def test_the_lock_delay_of_a_held_lock_shows_on_its_page(admin_client: Client) -> None:
    lock = DistributedLock.objects.acquire("job:held", "worker-1", ttl=60, lock_delay=45)
    assert lock is not None

    page = admin_client.get(reverse("admin:django_dlock_distributedlock_change", args=[lock.pk]))

    html = page.content.decode()
    assert "Lock delay" in html
    assert "45 s" in html
    assert cells(admin_client.get(CHANGELIST))["job:held"]["time left"].startswith("in ")
