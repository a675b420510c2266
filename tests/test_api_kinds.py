"""The HTTP API of the lock kinds (CONTRACT.md, "Lock kinds"): the new fields,
holders on GET, DELETE 200 while holds remain, 409 kind-mismatch. Every
response is also checked against the served OpenAPI schema."""

from __future__ import annotations

import pytest

pytest.importorskip("rest_framework")

from django.contrib.auth.models import User

from tests.api_utils import CheckedClient, client_for, delete, post, problem, user_with_permissions
from tests.test_kinds import REFUSED

pytestmark = pytest.mark.django_db


@pytest.fixture
def api() -> CheckedClient:
    return client_for(User.objects.create_user("alice"))


@pytest.fixture
def operator_api() -> CheckedClient:
    return client_for(user_with_permissions("olga", "change_distributedlock"))


def test_readers_hold_together_and_get_shows_them(
    api: CheckedClient, operator_api: CheckedClient
) -> None:
    first = post(api, "/api/locks/doc:7", {"owner": "r1", "shared": True, "label": "reader 1"})
    second = post(api, "/api/locks/doc:7", {"owner": "r2", "shared": True})
    assert first.status_code == second.status_code == 200
    assert first.json()["mode"] == second.json()["mode"] == "shared"
    assert first.json()["fencing_token"] < second.json()["fencing_token"]
    writer = post(api, "/api/locks/doc:7", {"owner": "w"})
    assert writer.json()["acquired"] is False and int(writer["Retry-After"]) >= 1

    seen = api.get("/api/locks/doc:7").json()
    assert seen["mode"] == "shared" and "owner" not in seen
    assert [(h["label"], "owner" in h) for h in seen["holders"]] == [
        ("reader 1", False),
        ("", False),
    ]
    operator = operator_api.get("/api/locks/doc:7").json()
    assert [h["owner"] for h in operator["holders"]] == ["r1", "r2"]
    listed = operator_api.get("/api/locks").json()["results"]
    assert [len(lock["holders"]) for lock in listed] == [2]


def test_delete_answers_200_while_holds_remain_and_204_at_the_last(api: CheckedClient) -> None:
    for _ in range(2):
        assert post(api, "/api/locks/re:1", {"owner": "w", "reentrant": True}).status_code == 200
    assert api.get("/api/locks/re:1").json()["hold_count"] == 2
    once = delete(api, "/api/locks/re:1", {"owner": "w"})
    assert once.status_code == 200 and once.json()["hold_count"] == 1
    assert delete(api, "/api/locks/re:1", {"owner": "w"}).status_code == 204
    problem(delete(api, "/api/locks/re:1", {"owner": "w"}), 404, "lock-not-found")


def test_a_semaphore_admits_its_limit_and_refuses_another_kind(api: CheckedClient) -> None:
    for owner in ("a", "b"):
        answer = post(api, "/api/locks/gpu", {"owner": owner, "limit": 2})
        assert answer.json()["acquired"] is True and answer.json()["limit"] == 2
    assert post(api, "/api/locks/gpu", {"owner": "c", "limit": 2}).json()["acquired"] is False
    problem(post(api, "/api/locks/gpu", {"owner": "c", "limit": 3}), 409, "kind-mismatch")
    problem(post(api, "/api/locks/gpu", {"owner": "c"}), 409, "kind-mismatch")
    renewed = post(api, "/api/locks/gpu/renew", {"owner": "a", "ttl": 90})
    assert renewed.status_code == 200 and renewed.json()["owner"] == "a"
    assert delete(api, "/api/locks/gpu", {"owner": "a"}).status_code == 204


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"shared": "true"}, "shared"),
        ({"reentrant": 1}, "reentrant"),
        ({"limit": 0}, "limit"),
        ({"limit": True}, "limit"),
        ({"label": "x" * 256}, "label"),
        ({"label": 7}, "label"),
    ],
)
def test_bad_kind_fields_are_a_400_naming_the_field(
    api: CheckedClient, body: dict[str, object], field: str
) -> None:
    details = problem(post(api, "/api/locks/job", body), 400, "invalid-input")
    assert list(details["errors"]) == [field]


@pytest.mark.parametrize(("flags", "message"), REFUSED)
def test_a_refused_kind_is_a_400_naming_the_field_with_the_message_of_lock(
    api: CheckedClient, flags: dict[str, object], message: str
) -> None:
    details = problem(post(api, "/api/locks/job", flags), 400, "invalid-input")
    assert details["errors"] == dict.fromkeys(flags, [message])
