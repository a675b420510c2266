"""The HTTP API of CONTRACT.md: every route, status code and problem type.

Every response of these tests is also checked against the OpenAPI schema the
test project serves (``tests.api_utils.CheckedClient``).
"""

from __future__ import annotations

import base64
import json
from datetime import timedelta
from typing import Any

import pytest

pytest.importorskip("rest_framework")

from django.contrib.auth.models import User
from django.db import connection
from django.test import override_settings
from django.urls import reverse
from django.utils.dateparse import parse_datetime
from rest_framework.authentication import SessionAuthentication
from rest_framework.throttling import UserRateThrottle

from django_dlock.api.views import LockViewSet
from django_dlock.models import DistributedLock
from django_dlock.rules.clock import DatabaseNow
from tests.api_utils import (
    PROBLEM,
    CheckedClient,
    client_for,
    delete,
    post,
    problem,
    user_with_permissions,
)
from tests.utils import expire, make_delayed_lock

pytestmark = pytest.mark.django_db


@pytest.fixture
def api() -> CheckedClient:
    """An authenticated client of a user who is not staff."""
    return client_for(User.objects.create_user("alice"))


@pytest.fixture
def staff_api() -> CheckedClient:
    return client_for(User.objects.create_user("root", is_staff=True))


@pytest.fixture
def operator_api() -> CheckedClient:
    """A user who may force-release locks, and so may see owners."""
    return client_for(user_with_permissions("operator", "change_distributedlock"))


@pytest.fixture
def anonymous() -> CheckedClient:
    return CheckedClient()


# What every lock in an answer says of its kind (CONTRACT.md, "Lock kinds"),
# and its lock-delay (null without one).
KIND_KEYS = {"mode", "hold_count", "limit", "label", "lock_delay"}


def as_time(value: str) -> Any:
    parsed = parse_datetime(value)
    assert parsed is not None and value.endswith("Z"), value  # ISO 8601, UTC
    return parsed


# -- POST /locks/{resource}: acquire -------------------------------------------


def test_acquire_returns_the_lock(api: CheckedClient) -> None:
    response = post(api, "/api/locks/job:42", {"owner": "worker-1", "ttl": 30})
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {
        "acquired",
        "resource",
        "owner",
        "fencing_token",
        "acquired_at",
        "expires_at",
        "mode",
        "hold_count",
        "limit",
        "label",
        "lock_delay",
    }
    assert body["acquired"] is True
    assert body["lock_delay"] is None
    assert body["resource"] == "job:42"
    assert body["owner"] == "worker-1"
    assert body["fencing_token"] >= 1
    lifetime = as_time(body["expires_at"]) - as_time(body["acquired_at"])
    assert lifetime == timedelta(seconds=30)
    lock = DistributedLock.objects.get(resource="job:42")
    assert (lock.owner, lock.fencing_token) == ("worker-1", body["fencing_token"])
    assert "Retry-After" not in response


def test_acquire_uses_the_default_ttl(api: CheckedClient, settings: Any) -> None:
    settings.DLOCK_DEFAULT_TTL = 17
    body = post(api, "/api/locks/job:1", {"owner": "w"}).json()
    assert as_time(body["expires_at"]) - as_time(body["acquired_at"]) == timedelta(seconds=17)


def test_acquire_without_owner_generates_a_secret_one(api: CheckedClient) -> None:
    first = post(api, "/api/locks/a").json()
    second = post(api, "/api/locks/b", {"ttl": 5}).json()
    assert first["acquired"] and second["acquired"]
    for owner in (first["owner"], second["owner"]):
        assert len(owner) == 32 and int(owner, 16) >= 0  # 128 random bits, hex
    assert first["owner"] != second["owner"]
    assert DistributedLock.objects.get(resource="a").owner == first["owner"]


def test_acquire_held_by_another_owner_says_when_to_retry(api: CheckedClient) -> None:
    held = post(api, "/api/locks/report", {"owner": "a", "ttl": 30}).json()
    response = post(api, "/api/locks/report", {"owner": "b", "ttl": 5})
    assert response.status_code == 200
    assert response.json() == {
        "acquired": False,
        "resource": "report",
        "expires_at": held["expires_at"],
    }
    assert response["Retry-After"] in ("29", "30")  # whole seconds, rounded up
    assert DistributedLock.objects.get(resource="report").owner == "a"


def test_retry_after_rounds_up_by_the_database_clock(api: CheckedClient) -> None:
    post(api, "/api/locks/r", {"owner": "a"})
    DistributedLock.objects.filter(resource="r").update(
        expires_at=DatabaseNow() + timedelta(seconds=5.5)
    )
    response = post(api, "/api/locks/r", {"owner": "b"})
    assert response.json()["acquired"] is False
    assert response["Retry-After"] in ("5", "6")  # ceil(5.5 - the time passed since)


def test_reacquire_by_the_holder_keeps_the_token(api: CheckedClient) -> None:
    first = post(api, "/api/locks/x", {"owner": "a", "ttl": 10}).json()
    again = post(api, "/api/locks/x", {"owner": "a", "ttl": 60}).json()
    assert again["acquired"] is True
    assert again["fencing_token"] == first["fencing_token"]
    assert again["acquired_at"] == first["acquired_at"]
    assert as_time(again["expires_at"]) > as_time(first["expires_at"])


def test_an_expired_lock_is_taken_over_with_a_larger_token(api: CheckedClient) -> None:
    first = post(api, "/api/locks/x", {"owner": "a"}).json()
    expire("x")
    second = post(api, "/api/locks/x", {"owner": "b"}).json()
    assert second["acquired"] is True
    assert second["owner"] == "b"
    assert second["fencing_token"] > first["fencing_token"]


def test_resources_with_periods_and_odd_characters(api: CheckedClient) -> None:
    for resource in ("billing.nightly", "a.b.c", "report:2026-05", "ü-ñ", "x%y", "renew", "..."):
        path = "/api/locks/" + resource.replace("%", "%25")
        body = post(api, path, {"owner": "o"}).json()
        assert body["resource"] == resource, body
        assert api.get(path).json()["resource"] == resource


# -- GET /locks/{resource} -----------------------------------------------------


def test_get_returns_the_lock_without_owner_to_users(api: CheckedClient) -> None:
    acquired = post(api, "/api/locks/job", {"owner": "secret-token", "ttl": 30}).json()
    response = api.get("/api/locks/job")
    assert response.status_code == 200
    body = response.json()
    assert "owner" not in body
    assert body == {key: acquired[key] for key in body}
    assert set(body) == {"resource", "fencing_token", "acquired_at", "expires_at", *KIND_KEYS}


def test_get_shows_owner_to_operators(api: CheckedClient, operator_api: CheckedClient) -> None:
    post(api, "/api/locks/job", {"owner": "secret-token"})
    body = operator_api.get("/api/locks/job").json()
    assert body["owner"] == "secret-token"


def test_get_absent_expired_or_released_lock_is_404(api: CheckedClient) -> None:
    problem(api.get("/api/locks/never"), 404, "lock-not-found")
    post(api, "/api/locks/old", {"owner": "a"})
    expire("old")
    problem(api.get("/api/locks/old"), 404, "lock-not-found")
    post(api, "/api/locks/gone", {"owner": "a"})
    assert delete(api, "/api/locks/gone", {"owner": "a"}).status_code == 204
    problem(api.get("/api/locks/gone"), 404, "lock-not-found")


# -- POST /locks/{resource}/renew ----------------------------------------------


def test_renew_extends_the_lock(api: CheckedClient) -> None:
    acquired = post(api, "/api/locks/job", {"owner": "a", "ttl": 10}).json()
    response = post(api, "/api/locks/job/renew", {"owner": "a", "ttl": 100})
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {
        "resource",
        "owner",
        "fencing_token",
        "acquired_at",
        "expires_at",
        *KIND_KEYS,
    }
    assert body["owner"] == "a"
    assert body["fencing_token"] == acquired["fencing_token"]
    assert body["acquired_at"] == acquired["acquired_at"]  # renew does not change it
    assert as_time(body["expires_at"]) - as_time(acquired["expires_at"]) > timedelta(seconds=80)


def test_renew_without_ttl_uses_the_default(api: CheckedClient, settings: Any) -> None:
    settings.DLOCK_DEFAULT_TTL = 1000
    post(api, "/api/locks/job", {"owner": "a", "ttl": 10})
    body = post(api, "/api/locks/job/renew", {"owner": "a"}).json()
    assert as_time(body["expires_at"]) - as_time(body["acquired_at"]) >= timedelta(seconds=999)


def test_renew_of_no_lock_is_404(api: CheckedClient) -> None:
    problem(post(api, "/api/locks/never/renew", {"owner": "a"}), 404, "lock-not-found")
    post(api, "/api/locks/released", {"owner": "a"})
    delete(api, "/api/locks/released", {"owner": "a"})
    problem(post(api, "/api/locks/released/renew", {"owner": "a"}), 404, "lock-not-found")


def test_renew_of_an_expired_lock_or_by_another_owner_is_409(api: CheckedClient) -> None:
    post(api, "/api/locks/job", {"owner": "a"})
    problem(post(api, "/api/locks/job/renew", {"owner": "b"}), 409, "lock-not-held")
    expire("job")
    problem(post(api, "/api/locks/job/renew", {"owner": "a"}), 409, "lock-not-held")
    assert DistributedLock.objects.get(resource="job").owner == "a"


# -- DELETE /locks/{resource} --------------------------------------------------


def test_release(api: CheckedClient) -> None:
    post(api, "/api/locks/job", {"owner": "a"})
    response = delete(api, "/api/locks/job", {"owner": "a"})
    assert response.status_code == 204
    assert response.content == b""
    assert not DistributedLock.objects.active().filter(resource="job").exists()


def test_release_of_no_lock_is_404(api: CheckedClient) -> None:
    problem(delete(api, "/api/locks/never", {"owner": "a"}), 404, "lock-not-found")
    post(api, "/api/locks/old", {"owner": "a"})
    expire("old")
    problem(delete(api, "/api/locks/old", {"owner": "a"}), 404, "lock-not-found")


def test_release_by_another_owner_is_403_and_keeps_the_lock(api: CheckedClient) -> None:
    post(api, "/api/locks/job", {"owner": "a"})
    problem(delete(api, "/api/locks/job", {"owner": "b"}), 403, "lock-owner-mismatch")
    assert DistributedLock.objects.active().get(resource="job").owner == "a"


def test_release_needs_the_owner(api: CheckedClient) -> None:
    post(api, "/api/locks/job", {"owner": "a"})
    body = problem(api.delete("/api/locks/job"), 400, "invalid-input")
    assert list(body["errors"]) == ["owner"]


# -- GET /locks ----------------------------------------------------------------


def test_list_shows_unexpired_locks_by_resource(api: CheckedClient) -> None:
    for resource in ("job:3", "job:1", "other", "job:2"):
        post(api, f"/api/locks/{resource}", {"owner": "secret"})
    expire("job:2")
    response = api.get("/api/locks")
    assert response.status_code == 200
    body = response.json()
    assert [lock["resource"] for lock in body["results"]] == ["job:1", "job:3", "other"]
    assert all("owner" not in lock for lock in body["results"])
    assert body["next"] is None and body["previous"] is None


def test_list_by_prefix(api: CheckedClient, operator_api: CheckedClient) -> None:
    for resource in ("job:1", "job:2", "jobs", "other"):
        post(api, f"/api/locks/{resource}", {"owner": f"o-{resource}"})
    body = operator_api.get("/api/locks", {"prefix": "job:"}).json()
    assert [(lock["resource"], lock["owner"]) for lock in body["results"]] == [
        ("job:1", "o-job:1"),
        ("job:2", "o-job:2"),
    ]
    assert api.get("/api/locks", {"prefix": "nothing"}).json()["results"] == []


def test_list_is_paginated_by_cursor(api: CheckedClient) -> None:
    resources = [f"r{i:02d}" for i in range(7)]
    for resource in resources:
        post(api, f"/api/locks/{resource}", {"owner": "o"})
    seen, url = [], "/api/locks?page_size=3"
    while url:
        page = api.get(url).json()
        assert len(page["results"]) <= 3
        seen += [lock["resource"] for lock in page["results"]]
        url = page["next"]
    assert seen == resources


def test_list_rejects_a_bad_cursor_or_prefix(api: CheckedClient) -> None:
    body = problem(api.get("/api/locks", {"cursor": "garbage"}), 400, "invalid-input")
    assert list(body["errors"]) == ["cursor"]
    # A well-formed cursor whose position PostgreSQL cannot compare with (NUL).
    forged = base64.b64encode(b"p=a%00b").decode()
    body = problem(api.get("/api/locks", {"cursor": forged}), 400, "invalid-input")
    assert list(body["errors"]) == ["cursor"]
    body = problem(api.get("/api/locks", {"prefix": "a b"}), 400, "invalid-input")
    assert list(body["errors"]) == ["prefix"]
    body = problem(api.get("/api/locks", {"prefix": "x" * 256}), 400, "invalid-input")
    assert list(body["errors"]) == ["prefix"]


# -- routes --------------------------------------------------------------------


@pytest.mark.parametrize("slash", ["", "/"])
def test_trailing_slash_is_optional(api: CheckedClient, slash: str) -> None:
    assert post(api, f"/api/locks/job.1{slash}", {"owner": "a"}).json()["acquired"]
    assert api.get(f"/api/locks/job.1{slash}").status_code == 200
    assert post(api, f"/api/locks/job.1/renew{slash}", {"owner": "a"}).status_code == 200
    assert api.get(f"/api/locks{slash}").json()["results"][0]["resource"] == "job.1"
    assert delete(api, f"/api/locks/job.1{slash}", {"owner": "a"}).status_code == 204


def test_url_names() -> None:
    assert reverse("django_dlock:lock-list") == "/api/locks"
    assert reverse("django_dlock:lock-detail", args=["billing.nightly"]) == (
        "/api/locks/billing.nightly"
    )
    assert reverse("django_dlock:lock-renew", args=["a"]) == "/api/locks/a/renew"


def test_views_never_run_inside_atomic_requests(
    api: CheckedClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(connection.settings_dict, "ATOMIC_REQUESTS", True)
    assert post(api, "/api/locks/x", {"owner": "a"}).json()["acquired"] is True
    assert post(api, "/api/locks/x/renew", {"owner": "a"}).status_code == 200
    assert delete(api, "/api/locks/x", {"owner": "a"}).status_code == 204


# -- input validation: a 400 problem naming the field --------------------------


def _invalid(response: Any, field: str) -> None:
    body = problem(response, 400, "invalid-input")
    assert list(body["errors"]) == [field], body
    assert all(isinstance(m, str) and m for m in body["errors"][field])
    assert field in body["detail"]


@pytest.mark.parametrize(
    "path",
    [
        "/api/locks/a%20b",  # whitespace once URL-decoded
        "/api/locks/a%09b",
        "/api/locks/%E2%80%83",  # an em space
        "/api/locks/a%00b",
        "/api/locks/a%7Fb",
        "/api/locks/" + "x" * 256,
    ],
)
def test_invalid_resource(api: CheckedClient, path: str) -> None:
    _invalid(post(api, path, {"owner": "a"}), "resource")
    _invalid(api.get(path), "resource")
    _invalid(post(api, path + "/renew", {"owner": "a"}), "resource")
    _invalid(delete(api, path, {"owner": "a"}), "resource")


def test_longest_resource_is_valid(api: CheckedClient) -> None:
    assert post(api, "/api/locks/" + "x" * 255, {"owner": "a"}).json()["acquired"]


@pytest.mark.parametrize(
    "owner", ["", "x" * 256, 42, None, True, ["a"], {"a": 1}, "a\x00b", "\ud800"]
)
def test_invalid_owner(api: CheckedClient, owner: Any) -> None:
    _invalid(post(api, "/api/locks/job", {"owner": owner}), "owner")
    _invalid(post(api, "/api/locks/job/renew", {"owner": owner}), "owner")
    _invalid(delete(api, "/api/locks/job", {"owner": owner}), "owner")


def test_owner_is_kept_exactly(api: CheckedClient) -> None:
    owner = " spaced owner ü " + "x" * 239
    assert post(api, "/api/locks/job", {"owner": owner}).json()["owner"] == owner
    assert delete(api, "/api/locks/job", {"owner": owner}).status_code == 204


@pytest.mark.parametrize(
    "ttl", [0, -1, -0.5, 86400.001, 86401, 10**400, "10", "abc", True, False, None, [1], {}]
)
def test_invalid_ttl(api: CheckedClient, ttl: Any) -> None:
    _invalid(post(api, "/api/locks/job", {"owner": "a", "ttl": ttl}), "ttl")
    _invalid(post(api, "/api/locks/job/renew", {"owner": "a", "ttl": ttl}), "ttl")
    assert not DistributedLock.objects.exists()


def test_ttl_limit_follows_dlock_max_ttl(api: CheckedClient, settings: Any) -> None:
    settings.DLOCK_MAX_TTL = 10
    _invalid(post(api, "/api/locks/job", {"owner": "a", "ttl": 11}), "ttl")
    assert post(api, "/api/locks/job", {"owner": "a", "ttl": 10}).json()["acquired"]
    assert post(api, "/api/locks/job", {"owner": "a", "ttl": 0.25}).json()["acquired"]


@pytest.mark.parametrize("text", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_non_finite_ttl(api: CheckedClient, text: str) -> None:
    text = '{"owner": "a", "ttl": ' + text + "}"
    response = api.generic("POST", "/api/locks/job", text, content_type="application/json")
    body = problem(response, 400, "invalid-input")
    assert list(body["errors"]) in (["ttl"], ["body"])


@pytest.mark.parametrize("text", ["{bad", '{"owner": ', "[", '"\\x"', "\xff"])
def test_malformed_json_is_400_naming_the_body(api: CheckedClient, text: str) -> None:
    response = api.generic(
        "POST",
        "/api/locks/job",
        text.encode("latin-1"),  # type: ignore[arg-type]  # Django takes bytes; the stubs say str
        content_type="application/json",
    )
    body = problem(response, 400, "invalid-input")
    assert list(body["errors"]) == ["body"]


@pytest.mark.parametrize("payload", [[], ["owner"], "owner", 42, None, True])
def test_body_that_is_not_an_object(api: CheckedClient, payload: Any) -> None:
    for path in ("/api/locks/job", "/api/locks/job/renew"):
        response = api.generic("POST", path, json.dumps(payload), content_type="application/json")
        _invalid(response, "body")


# -- problem details for DRF's own errors --------------------------------------


def test_not_authenticated_is_401_with_token_authentication(anonymous: CheckedClient) -> None:
    for response in (
        anonymous.get("/api/locks"),
        anonymous.get("/api/locks/job"),
        post(anonymous, "/api/locks/job", {}),
        post(anonymous, "/api/locks/job/renew", {"owner": "a"}),
        delete(anonymous, "/api/locks/job", {"owner": "a"}),
    ):
        problem(response, 401, "not-authenticated")
        assert response["WWW-Authenticate"] == "Token"
    assert not DistributedLock.objects.exists()


def test_a_wrong_token_is_401() -> None:
    client = CheckedClient()
    client.credentials(HTTP_AUTHORIZATION="Token nope")
    problem(client.get("/api/locks"), 401, "not-authenticated")


def test_not_authenticated_is_403_with_session_authentication_only(
    anonymous: CheckedClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # DRF reads DEFAULT_AUTHENTICATION_CLASSES when the view class is created.
    monkeypatch.setattr(LockViewSet, "authentication_classes", [SessionAuthentication])
    problem(anonymous.get("/api/locks"), 403, "not-authenticated")


def test_session_authentication_works(anonymous: CheckedClient) -> None:
    anonymous.force_login(User.objects.create_user("bob"))
    response = post(anonymous, "/api/locks/job", {"owner": "a"})
    # SessionAuthentication enforces CSRF only for logged-in browsers (the
    # test client skips the check): the lock was acquired.
    assert response.status_code == 200, response.content
    assert response.json()["acquired"] is True


@override_settings(DLOCK_API_PERMISSION_CLASSES=["rest_framework.permissions.IsAdminUser"])
def test_permission_classes_come_from_the_setting(
    api: CheckedClient, staff_api: CheckedClient
) -> None:
    problem(api.get("/api/locks"), 403, "permission-denied")
    problem(post(api, "/api/locks/job", {"owner": "a"}), 403, "permission-denied")
    assert post(staff_api, "/api/locks/job", {"owner": "a"}).status_code == 200


@override_settings(DLOCK_API_PERMISSION_CLASSES=["rest_framework.permissions.AllowAny"])
def test_allow_any_lets_anonymous_users_lock_but_hides_owners(anonymous: CheckedClient) -> None:
    acquired = post(anonymous, "/api/locks/job", {"owner": "a"}).json()
    assert acquired["acquired"] is True and acquired["owner"] == "a"  # the caller's own
    assert "owner" not in anonymous.get("/api/locks/job").json()
    assert "owner" not in anonymous.get("/api/locks").json()["results"][0]


def test_method_not_allowed_is_405(api: CheckedClient) -> None:
    for method, path in [
        ("PUT", "/api/locks/job"),
        ("PATCH", "/api/locks/job"),
        ("POST", "/api/locks"),
        ("DELETE", "/api/locks"),
        ("GET", "/api/locks/job/renew"),
        ("DELETE", "/api/locks/job/renew"),
    ]:
        response = api.generic(method, path, "{}", content_type="application/json")
        problem(response, 405, "method-not-allowed")
        assert method not in response["Allow"]


def test_unknown_route_under_locks_is_a_404_problem(api: CheckedClient) -> None:
    for path in ("/api/locks/a/b", "/api/locks/a/renew/x", "/api/locks/a%2Fb/c"):
        problem(api.get(path), 404, "not-found")


def test_not_acceptable_is_406(api: CheckedClient) -> None:
    problem(api.get("/api/locks", HTTP_ACCEPT="text/html"), 406, "not-acceptable")


def test_unsupported_media_type_is_415(api: CheckedClient) -> None:
    for content_type in ("text/plain", "application/x-www-form-urlencoded"):
        response = api.generic("POST", "/api/locks/job", "owner=a", content_type=content_type)
        problem(response, 415, "unsupported-media-type")
    assert not DistributedLock.objects.exists()


class TwoAnHour(UserRateThrottle):
    rate = "2/hour"


@override_settings(CACHES={"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}})
def test_throttled_is_429_with_retry_after(
    api: CheckedClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(LockViewSet, "throttle_classes", [TwoAnHour])
    assert api.get("/api/locks").status_code == 200
    assert api.get("/api/locks").status_code == 200
    response = api.get("/api/locks")
    problem(response, 429, "throttled")
    assert int(response["Retry-After"]) > 0


def test_problem_details_stay_inside_the_lock_api(client: Any) -> None:
    """The host's other DRF endpoints keep DRF's own error format."""
    response = client.get("/host-api/")
    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"detail": "host error"}
    # and Django's pages outside the API are Django's
    response = client.get("/no-such-page/")
    assert response.status_code == 404
    assert response["Content-Type"] != PROBLEM


# -- lock-delay ----------------------------------------------------------------


def test_acquire_with_a_lock_delay_shows_it_in_every_answer(
    api: CheckedClient, operator_api: CheckedClient
) -> None:
    body = post(api, "/api/locks/job:d", {"owner": "a", "ttl": 30, "lock_delay": 2.5}).json()
    assert body["acquired"] is True and body["lock_delay"] == 2.5
    assert DistributedLock.objects.get(resource="job:d").lock_delay == timedelta(seconds=2.5)
    assert api.get("/api/locks/job:d").json()["lock_delay"] == 2.5
    assert operator_api.get("/api/locks").json()["results"][0]["lock_delay"] == 2.5
    renewed = post(api, "/api/locks/job:d/renew", {"owner": "a", "ttl": 60}).json()
    assert renewed["lock_delay"] == 2.5
    assert post(api, "/api/locks/job:none", {"owner": "a"}).json()["lock_delay"] is None


@pytest.mark.parametrize("force", [False, True], ids=["expired", "force-released"])
def test_acquire_refused_by_a_lock_delay_says_when_the_resource_is_available(
    api: CheckedClient, force: bool
) -> None:
    lock = make_delayed_lock("job:delayed", "a", lock_delay=30 * 60, force=force)
    assert lock.available_at is not None

    response = post(api, "/api/locks/job:delayed", {"owner": "b", "ttl": 5})

    assert response.status_code == 200
    assert response.json() == {
        "acquired": False,
        "resource": "job:delayed",
        "expires_at": lock.available_at.isoformat().replace("+00:00", "Z"),
    }
    assert as_time(response.json()["expires_at"]) == lock.available_at
    assert response["Retry-After"] in ("1799", "1800")  # whole seconds, rounded up
    # Nobody holds it meanwhile: not found, not listed.
    problem(api.get("/api/locks/job:delayed"), 404, "lock-not-found")
    assert api.get("/api/locks").json()["results"] == []
    assert DistributedLock.objects.get(resource="job:delayed").owner != "b"


def test_a_release_by_the_holder_leaves_no_delay(api: CheckedClient) -> None:
    post(api, "/api/locks/job:r", {"owner": "a", "ttl": 30, "lock_delay": 600})
    assert delete(api, "/api/locks/job:r", {"owner": "a"}).status_code == 204

    assert post(api, "/api/locks/job:r", {"owner": "b"}).json()["acquired"] is True


@pytest.mark.parametrize(
    "lock_delay", [-1, -0.5, 86400.001, 10**400, "10", "abc", True, False, None, [1], {}]
)
def test_invalid_lock_delay(api: CheckedClient, lock_delay: Any) -> None:
    _invalid(post(api, "/api/locks/job", {"owner": "a", "lock_delay": lock_delay}), "lock_delay")
    assert not DistributedLock.objects.exists()


@pytest.mark.parametrize("kind", [{"shared": True}, {"limit": 3}], ids=["reader", "permit"])
def test_a_lock_delay_is_for_exclusive_locks_only(api: CheckedClient, kind: Any) -> None:
    body = {"owner": "a", "lock_delay": 5, **kind}
    response = post(api, "/api/locks/job", body)
    _invalid(response, "lock_delay")
    assert "exclusively" in response.json()["errors"]["lock_delay"][0]
    assert not DistributedLock.objects.exists()
    # None at all is no delay, whatever the kind.
    assert post(api, "/api/locks/job", {**body, "lock_delay": 0}).json()["acquired"] is True
