"""``POST /api/throttles/{key}``: a use of a throttle key over HTTP, every answer checked
against the served OpenAPI schema."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("rest_framework")

from django.contrib.auth.models import User

from django_dlock.models import ThrottleSlot
from django_dlock.rules.throttle import WIDTH
from tests.api_utils import client_for, post, problem, served_schema

pytestmark = pytest.mark.django_db


@pytest.fixture
def client() -> Any:
    return client_for(User.objects.create_user("worker"))


def test_granted_until_the_rate_is_used_then_when_to_come_back(client: Any) -> None:
    answers = [post(client, "/api/throttles/email:42", {"rate": "2/m"}) for _ in range(3)]

    assert [answer.status_code for answer in answers] == [200, 200, 200]
    bodies = [json.loads(answer.content) for answer in answers]
    assert [body["granted"] for body in bodies] == [True, True, False]
    assert [body["remaining"] for body in bodies] == [1, 0, 0]
    assert bodies[0]["retry_after"] == 0 and "Retry-After" not in answers[0]
    assert 0 < bodies[2]["retry_after"] <= 60
    assert 1 <= int(answers[2]["Retry-After"]) <= 60
    assert {body["key"] for body in bodies} == {"email:42"}
    assert len(ThrottleSlot.objects.get(key="email:42").ring) == 2 * WIDTH  # two uses kept


def test_invalid_key_or_rate_is_a_400_naming_it(client: Any) -> None:
    bad_rate = problem(
        post(client, "/api/throttles/email:42", {"rate": "often"}), 400, "invalid-input"
    )
    assert list(bad_rate["errors"]) == ["rate"]
    missing = problem(post(client, "/api/throttles/email:42", {}), 400, "invalid-input")
    assert list(missing["errors"]) == ["rate"]
    bad_key = problem(
        post(client, "/api/throttles/email%0A42", {"rate": "1/m"}), 400, "invalid-input"
    )
    assert list(bad_key["errors"]) == ["key"]
    assert not ThrottleSlot.objects.exists()


def test_a_named_rate_from_the_settings(client: Any, settings: Any) -> None:
    settings.DLOCK_THROTTLE_RATES = {"email": "1/h"}
    first = json.loads(post(client, "/api/throttles/email:1", {"rate": "email"}).content)
    second = json.loads(post(client, "/api/throttles/email:1", {"rate": "email"}).content)
    assert (first["granted"], second["granted"], second["rate"]) == (True, False, "1/h")


def test_authentication_is_required() -> None:
    problem(
        post(client_for(None), "/api/throttles/email:1", {"rate": "1/m"}), 401, "not-authenticated"
    )
    assert not ThrottleSlot.objects.exists()


def test_other_paths_and_methods(client: Any) -> None:
    problem(post(client, "/api/throttles/a/b", {"rate": "1/m"}), 404, "not-found")
    problem(client.get("/api/throttles/email:1"), 405, "method-not-allowed")


def test_the_schema_documents_the_route() -> None:
    operation = served_schema()["paths"]["/api/throttles/{key}"]["post"]
    assert operation["operationId"] == "throttles_use"
    assert {"200", "400", "401", "403", "404", "405", "406", "413", "415", "429"} == set(
        operation["responses"]
    )
