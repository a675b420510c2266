"""Schemathesis against the served OpenAPI schema: generated requests, valid and
invalid, to every operation of the lock API, one by one and as stateful
sequences that follow the schema's links (acquire, then read, renew and release
the lock it returned). No answer may be a 500 or break the schema (status code,
content type, headers, body).

Driven through schemathesis's Python API and Hypothesis, so the tests run in
this suite (and its database) under pytest 9. ``DLOCK_FUZZ_EXAMPLES`` and
``DLOCK_FUZZ_STEPS`` make a deeper run.
"""

from __future__ import annotations

import copy
import os
import unicodedata
from collections import Counter
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote

import pytest

pytest.importorskip("schemathesis")

import schemathesis
from django.contrib.auth.models import User
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, Phase, given, settings
from rest_framework.authtoken.models import Token
from schemathesis.checks import negative_data_rejection, positive_data_acceptance
from schemathesis.generation.meta import negated_parameters

from django_dlock.models import DistributedLock
from tests.api_utils import served_schema, user_with_permissions

# Examples per operation and generation mode: 5 operations x 2 modes x 60 x 2 users
# (plus the requests schemathesis's checks make) is well over 1,000 requests.
EXAMPLES = int(os.environ.get("DLOCK_FUZZ_EXAMPLES", "60"))
MIN_REQUESTS = 1000
# Stateful scenarios, and steps per scenario.
SCENARIOS = int(os.environ.get("DLOCK_FUZZ_SCENARIOS", "40"))
STEPS = int(os.environ.get("DLOCK_FUZZ_STEPS", "8"))

USERS = {
    "user": lambda: User.objects.create_user("fuzz"),
    "operator": lambda: user_with_permissions("fuzz", "change_distributedlock", is_staff=True),
}


class LockApi:
    """The lock API's schema for schemathesis, wired to this process's Django."""

    def __init__(self, user: User, *, document_security: bool = True) -> None:
        token = Token.objects.create(user=user)
        self.headers = {"Authorization": f"Token {token.key}"}
        self.calls: Counter[str] = Counter()  # "METHOD template status", checks' calls too
        handler = WSGIHandler()

        def app(environ: dict[str, Any], start_response: Any) -> Any:
            def recording_start(status: str, headers: Any, *args: Any) -> Any:
                self.calls[f"{environ['REQUEST_METHOD']} {status.split()[0]}"] += 1
                return start_response(status, headers, *args)

            return handler(environ, recording_start)

        document = copy.deepcopy(served_schema())
        if not document_security:
            # Every call then carries the user's token (from the caller's headers),
            # and schemathesis draws no "send the Authorization header or not"
            # choice, whose odds it adapts as it goes: that made Hypothesis
            # report the stateful run's strategies as flaky on long runs.
            for item in document["paths"].values():
                for operation in item.values():
                    operation.pop("security", None)
            document.pop("security", None)
        schema = schemathesis.openapi.from_dict(document)
        schema.app = app
        self.schema: Any = schema.include(path_regex="^/api/locks")

    @property
    def total(self) -> int:
        return sum(self.calls.values())


def excluded_checks(case: Any) -> list[Any]:
    """Checks that would count a right answer against the API, for this case."""
    query, path = case.query or {}, case.path_parameters or {}
    # A resource carried by a link arrives percent-encoded, as the request before sent it.
    resource = path.get("resource")
    names = [unquote(resource) if isinstance(resource, str) else resource, query.get("prefix")]
    if isinstance(case.body, dict):
        names.append(case.body.get("label"))
    excluded: list[Any] = []
    if "cursor" in query or any(
        isinstance(name, str) and not unicodedata.is_normalized("NFC", name) for name in names
    ):
        # A cursor is opaque: one made up from the schema's "string" is rightly
        # refused (400). NFC is a rule no pattern expresses: a generated name or
        # label in another form is rightly refused too.
        excluded.append(positive_data_acceptance)
    elif isinstance(case.body, dict) and _delay_of_no_exclusive_lock(case.body):
        # A lock-delay is for exclusive locks: a rule across fields that the
        # schema says in words (a 400 naming lock_delay), as lock() has it.
        excluded.append(positive_data_acceptance)
    if _only_credentials_negated(case):
        # The schema offers two credentials, a token or the session cookie, and
        # every call carries the user's token (the caller's headers replace the
        # generated ones). A case whose only invalid part is a credential (no
        # "sessionid" cookie, a made-up Authorization) is then a valid call, and
        # its 2xx is right: schemathesis cannot see that one alternative is met.
        excluded.append(negative_data_rejection)
    # Every other check still runs.
    return excluded


CREDENTIALS = {"authorization", "sessionid"}


def _only_credentials_negated(case: Any) -> bool:
    # case._meta as generated: reading case.meta would revalidate the case first.
    negated = {name.lower() for name, _ in negated_parameters(case._meta)}
    return bool(negated) and negated <= CREDENTIALS


def _delay_of_no_exclusive_lock(body: dict[str, Any]) -> bool:
    return bool(body.get("lock_delay")) and (
        body.get("shared") is True or body.get("limit") is not None
    )


@pytest.mark.django_db
@pytest.mark.parametrize("who", list(USERS))
def test_generated_requests_find_no_server_error_and_no_schema_violation(
    django_app: None, who: str, record_property: Any
) -> None:
    api = LockApi(USERS[who]())
    operations = [result.ok() for result in api.schema.get_all_operations()]
    assert {op.label for op in operations} == {
        "GET /api/locks",
        "GET /api/locks/{resource}",
        "POST /api/locks/{resource}",
        "DELETE /api/locks/{resource}",
        "POST /api/locks/{resource}/renew",
    }
    cases = 0
    for operation in operations:
        for mode in schemathesis.GenerationMode:

            @given(case=operation.as_strategy(generation_mode=mode))
            @settings(
                max_examples=EXAMPLES,
                deadline=None,
                database=None,
                derandomize=True,
                phases=[Phase.explicit, Phase.generate, Phase.shrink],
                suppress_health_check=list(HealthCheck),
            )
            def run(case: Any) -> None:
                nonlocal cases
                cases += 1
                case.call_and_validate(headers=api.headers, excluded_checks=excluded_checks(case))

            run()
    record_property("schemathesis_cases", cases)
    record_property("schemathesis_calls", api.total)
    record_property("schemathesis_statuses", dict(api.calls))
    assert api.total >= MIN_REQUESTS / 2  # two runs, one per user
    assert not [call for call in api.calls if call.split()[1].startswith("5")]


@pytest.mark.django_db
@pytest.mark.parametrize("who", list(USERS))
def test_stateful_sequences_follow_the_links(
    django_app: None, who: str, record_property: Any
) -> None:
    api = LockApi(USERS[who](), document_security=False)
    # Valid inputs only: a link carries the resource of the request before, and
    # a made-up invalid one would be checked as if the schema promised it valid.
    # The test above sends the invalid inputs.
    api.schema.config.generation.update(modes=[schemathesis.GenerationMode.POSITIVE])

    steps = 0

    class LockSequences(api.schema.as_state_machine()):  # type: ignore[misc]
        def setup(self) -> None:
            # Each scenario starts from no locks, whatever the ones before left.
            DistributedLock.objects.all().delete()

        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            nonlocal steps
            steps += 1
            return {"headers": api.headers}

        def validate_response(
            self, response: Any, case: Any, additional_checks: Any = None, **kwargs: Any
        ) -> None:
            case.validate_response(
                response,
                additional_checks=additional_checks,
                excluded_checks=excluded_checks(case),
                headers=api.headers,
                transport_kwargs=kwargs,
            )

    LockSequences.run(
        settings=settings(
            max_examples=SCENARIOS,
            stateful_step_count=STEPS,
            deadline=None,
            database=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        )
    )
    record_property("stateful_steps", steps)
    record_property("stateful_calls", api.total)
    record_property("stateful_statuses", dict(api.calls))
    # The links were followed with the owner acquire returned: renewals and
    # releases that succeeded, which random owners would (almost) never reach.
    assert api.calls["DELETE 204"] >= 1, api.calls
    assert api.calls["POST 200"] >= 1, api.calls
    assert not [call for call in api.calls if call.split()[1].startswith("5")]


@pytest.fixture
def django_app(settings: Any) -> Iterator[None]:
    # Schemathesis's WSGI client sends "Host: localhost".
    settings.ALLOWED_HOSTS = ["localhost", "testserver"]
    served_schema()  # fetched by Django's test client, which reconnects the signals below
    # As Django's test client does: a request's end must not close the test's
    # connection (and its transaction).
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)
