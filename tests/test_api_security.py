"""Who may do what with the lock API: owner secrecy, per-resource permissions,
throttles, and owners never logged."""

from __future__ import annotations

import ast
import logging
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("rest_framework")

from django.conf import settings as django_settings
from django.contrib.auth.models import User
from django.core.cache import cache
from django.test import override_settings
from rest_framework.permissions import BasePermission

from django_dlock.api.permissions import ResourcePrefixPermission
from django_dlock.models import DistributedLock
from tests.api_utils import (
    CheckedClient,
    client_for,
    delete,
    post,
    problem,
    user_with_permissions,
)

pytestmark = pytest.mark.django_db

SECRET = "s3cret-owner-token"  # noqa: S105 - an owner token, not a password


def held(resource: str = "job:42", owner: str = SECRET) -> None:
    assert DistributedLock.objects.acquire(resource, owner=owner, ttl=60) is not None


# -- 1. owners are shown only to holders of change_distributedlock -------------


READERS = {
    "authenticated": lambda: User.objects.create_user("alice"),
    "staff without permissions": lambda: User.objects.create_user("staff", is_staff=True),
    "view permission only": lambda: user_with_permissions(
        "viewer", "view_distributedlock", is_staff=True
    ),
}


@pytest.mark.parametrize("reader", list(READERS))
def test_reads_hide_the_owner_without_the_change_permission(reader: str) -> None:
    held()
    client = client_for(READERS[reader]())
    assert "owner" not in client.get("/api/locks/job:42").json()
    assert "owner" not in client.get("/api/locks").json()["results"][0]


def test_staff_without_permissions_cannot_learn_the_owner_and_release() -> None:
    held()
    staff = client_for(User.objects.create_user("staff", is_staff=True))
    read = staff.get("/api/locks/job:42").json()
    assert SECRET not in str(read)
    problem(delete(staff, "/api/locks/job:42", {"owner": "guess"}), 403, "lock-owner-mismatch")
    assert DistributedLock.objects.active().get(resource="job:42").owner == SECRET


@pytest.mark.parametrize(
    "make_user",
    [
        lambda: user_with_permissions("operator", "change_distributedlock"),
        lambda: User.objects.create_superuser("root"),
    ],
    ids=["change permission", "superuser"],
)
def test_reads_show_the_owner_with_the_change_permission(make_user: Any) -> None:
    held()
    client = client_for(make_user())
    assert client.get("/api/locks/job:42").json()["owner"] == SECRET
    assert client.get("/api/locks").json()["results"][0]["owner"] == SECRET


def test_anonymous_gets_no_owner() -> None:
    held()
    anonymous = CheckedClient()
    response = anonymous.get("/api/locks/job:42")
    problem(response, 401, "not-authenticated")
    assert SECRET not in response.content.decode()
    with override_settings(DLOCK_API_PERMISSION_CLASSES=["rest_framework.permissions.AllowAny"]):
        assert "owner" not in anonymous.get("/api/locks/job:42").json()
        assert "owner" not in anonymous.get("/api/locks").json()["results"][0]


# -- 2. per-resource permissions -------------------------------------------------


class OwnPrefix(ResourcePrefixPermission):
    """Each user may lock only ``user-<username>:*``; staff may lock anything."""

    def get_resource_prefix(self, request: Any) -> str | None:
        return None if request.user.is_staff else f"user-{request.user.username}:"


class TenantSeven(BasePermission):
    """The raw hooks: the object is the resource name, a str."""

    def has_object_permission(self, request: Any, view: Any, obj: Any) -> bool:
        assert isinstance(obj, str)
        return obj.startswith("tenant-7:")

    def filter_resources(self, request: Any, view: Any, queryset: Any) -> Any:
        return queryset.with_resource_prefix("tenant-7:")


PREFIX_PER_USER = [
    "rest_framework.permissions.IsAuthenticated",
    "tests.test_api_security.OwnPrefix",
]


@override_settings(DLOCK_API_PERMISSION_CLASSES=PREFIX_PER_USER)
def test_prefix_per_user_limits_every_route() -> None:
    alice = client_for(User.objects.create_user("alice"))
    held("user-bob:report", owner="bob-owner")
    for response in (
        post(alice, "/api/locks/user-bob:job", {"owner": "a"}),
        alice.get("/api/locks/user-bob:report"),
        post(alice, "/api/locks/user-bob:report/renew", {"owner": "bob-owner"}),
        delete(alice, "/api/locks/user-bob:report", {"owner": "bob-owner"}),
    ):
        problem(response, 403, "permission-denied")
    assert not DistributedLock.objects.filter(resource="user-bob:job").exists()
    assert DistributedLock.objects.active().get(resource="user-bob:report").owner == "bob-owner"
    # Her own resources work.
    assert post(alice, "/api/locks/user-alice:job", {"owner": "a"}).json()["acquired"]
    assert alice.get("/api/locks/user-alice:job").status_code == 200
    assert post(alice, "/api/locks/user-alice:job/renew", {"owner": "a"}).status_code == 200
    # The list shows her locks only, with or without a prefix.
    listed = [lock["resource"] for lock in alice.get("/api/locks").json()["results"]]
    assert listed == ["user-alice:job"]
    assert alice.get("/api/locks", {"prefix": "user-bob"}).json()["results"] == []
    assert delete(alice, "/api/locks/user-alice:job", {"owner": "a"}).status_code == 204
    # Staff (by this host's rule) see every resource.
    staff = client_for(User.objects.create_user("root", is_staff=True))
    listed = [lock["resource"] for lock in staff.get("/api/locks").json()["results"]]
    assert listed == ["user-bob:report"]


@override_settings(
    DLOCK_API_PERMISSION_CLASSES=[
        "rest_framework.permissions.IsAuthenticated",
        "tests.test_api_security.TenantSeven",
    ]
)
def test_object_permission_receives_the_resource_name() -> None:
    client = client_for(User.objects.create_user("t7"))
    held("tenant-8:x")
    problem(post(client, "/api/locks/tenant-8:y", {}), 403, "permission-denied")
    assert post(client, "/api/locks/tenant-7:y", {}).json()["acquired"]
    listed = [lock["resource"] for lock in client.get("/api/locks").json()["results"]]
    assert listed == ["tenant-7:y"]


def test_by_default_any_authenticated_user_may_lock_any_resource() -> None:
    client = client_for(User.objects.create_user("alice"))
    assert post(client, "/api/locks/user-bob:anything", {}).json()["acquired"]


# -- 3. throttles ------------------------------------------------------------------


def throttle_rates(**rates: str) -> Any:
    """override_settings of DRF's DEFAULT_THROTTLE_RATES (DRF reloads its
    api_settings on setting_changed; the throttles read them per request)."""
    rest_framework = {**django_settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": rates}
    return override_settings(REST_FRAMEWORK=rest_framework)


@pytest.fixture(autouse=True)
def empty_cache() -> None:
    cache.clear()  # throttle histories live in the default cache


def test_every_call_counts_in_the_dlock_scope() -> None:
    client = client_for(User.objects.create_user("alice"))
    with throttle_rates(dlock="3/min"):
        assert post(client, "/api/locks/a", {"owner": "o"}).status_code == 200
        assert client.get("/api/locks/a").status_code == 200
        assert client.get("/api/locks").status_code == 200
        response = delete(client, "/api/locks/a", {"owner": "o"})
        body = problem(response, 429, "throttled")
        assert 1 <= int(response["Retry-After"]) <= 60
        assert "throttled" in body["detail"].lower()
    # Another user has a count of their own.
    other = client_for(User.objects.create_user("bob"))
    with throttle_rates(dlock="3/min"):
        assert other.get("/api/locks").status_code == 200


def test_failed_owner_checks_are_throttled_more_strictly() -> None:
    held("job", owner="right")
    attacker = client_for(User.objects.create_user("mallory"))
    with throttle_rates(**{"dlock-owner-failure": "2/hour"}):
        problem(
            delete(attacker, "/api/locks/job", {"owner": "guess-1"}), 403, "lock-owner-mismatch"
        )
        problem(post(attacker, "/api/locks/job/renew", {"owner": "guess-2"}), 409, "lock-not-held")
        # The rate is used up: even the right owner is refused, on both routes.
        response = delete(attacker, "/api/locks/job", {"owner": "right"})
        problem(response, 429, "throttled")
        assert int(response["Retry-After"]) > 3000  # the oldest failure leaves the hour
        problem(post(attacker, "/api/locks/job/renew", {"owner": "right"}), 429, "throttled")
        # Calls that check no owner still work.
        assert attacker.get("/api/locks/job").status_code == 200
        assert post(attacker, "/api/locks/other", {}).json()["acquired"]
    assert DistributedLock.objects.active().get(resource="job").owner == "right"


def test_successful_owner_checks_do_not_count() -> None:
    client = client_for(User.objects.create_user("alice"))
    held("job", owner="right")
    with throttle_rates(**{"dlock-owner-failure": "2/hour"}):
        for _ in range(5):
            assert post(client, "/api/locks/job/renew", {"owner": "right"}).status_code == 200
        assert delete(client, "/api/locks/job", {"owner": "right"}).status_code == 204


def test_without_rates_nothing_is_throttled() -> None:
    client = client_for(User.objects.create_user("alice"))
    held("job", owner="right")
    for _ in range(30):
        problem(delete(client, "/api/locks/job", {"owner": "guess"}), 403, "lock-owner-mismatch")


@override_settings(DLOCK_API_PERMISSION_CLASSES=["rest_framework.permissions.AllowAny"])
def test_anonymous_calls_are_throttled_by_address() -> None:
    anonymous = CheckedClient()
    with throttle_rates(dlock="2/min"):
        assert anonymous.get("/api/locks").status_code == 200
        assert anonymous.get("/api/locks", REMOTE_ADDR="10.0.0.9").status_code == 200
        assert anonymous.get("/api/locks").status_code == 200
        problem(anonymous.get("/api/locks"), 429, "throttled")
        assert anonymous.get("/api/locks", REMOTE_ADDR="10.0.0.9").status_code == 200


# -- 4. owners are never logged --------------------------------------------------


def test_no_log_record_carries_an_owner(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    client = client_for(User.objects.create_user("alice"))
    with throttle_rates(**{"dlock-owner-failure": "1/hour"}):
        post(client, "/api/locks/job", {"owner": SECRET})
        post(client, "/api/locks/job", {"owner": SECRET + "-2"})
        post(client, "/api/locks/job/renew", {"owner": SECRET + "-3"})  # 409
        delete(client, "/api/locks/job", {"owner": SECRET + "-4"})  # 429
        delete(client, "/api/locks/job", {"owner": SECRET + "\x00"})  # 400
    assert caplog.records  # django.request logs the 4xx answers
    for record in caplog.records:
        assert "s3cret" not in record.getMessage(), record.getMessage()


def _logged_names(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, source) of logging calls whose arguments mention an owner."""
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr
            in {"debug", "info", "warning", "error", "exception", "critical", "log"}
        ):
            names = {
                sub.attr if isinstance(sub, ast.Attribute) else sub.id
                for arg in node.args[1:]
                for sub in ast.walk(arg)
                if isinstance(sub, ast.Attribute | ast.Name)
            }
            if any("owner" in name for name in names):
                found.append((node.lineno, ast.unparse(node)))
    return found


def test_no_logging_call_of_the_package_mentions_an_owner() -> None:
    package = Path(__file__).resolve().parent.parent / "django_dlock"
    offenders = {
        str(path.relative_to(package)): calls
        for path in package.rglob("*.py")
        if (calls := _logged_names(ast.parse(path.read_text())))
    }
    assert offenders == {}
