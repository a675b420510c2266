"""Schemathesis against the served OpenAPI schema: generated requests, valid and
invalid, to every operation of the lock API. No answer may be a 500 or break the
schema (status code, content type, headers, body).

Driven through schemathesis's Python API and Hypothesis, so the test runs in
this suite (and its database) under pytest 9.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

schemathesis = pytest.importorskip("schemathesis")

from django.contrib.auth.models import User  # noqa: E402
from django.core.handlers.wsgi import WSGIHandler  # noqa: E402
from django.core.signals import request_finished, request_started  # noqa: E402
from django.db import close_old_connections  # noqa: E402
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from rest_framework.authtoken.models import Token  # noqa: E402
from schemathesis.checks import positive_data_acceptance  # noqa: E402

from tests.api_utils import served_schema  # noqa: E402

# Examples per operation and generation mode: 5 operations x 2 modes x 60 x 2 users
# (plus the requests schemathesis's checks make) is well over 1,000 requests.
EXAMPLES = int(os.environ.get("DLOCK_FUZZ_EXAMPLES", "60"))  # raise it for a deeper run
MIN_REQUESTS = 1000


@pytest.mark.django_db
@pytest.mark.parametrize("staff", [True, False], ids=["staff", "user"])
def test_generated_requests_find_no_server_error_and_no_schema_violation(
    settings_fixture: Any, staff: bool, record_property: Any
) -> None:
    user = User.objects.create_user("fuzz", is_staff=staff)
    token = Token.objects.create(user=user)
    schema = schemathesis.openapi.from_dict(served_schema())
    handler = WSGIHandler()
    calls: list[str] = []  # every request that reached the app, the checks' own included

    def app(environ: dict[str, Any], start_response: Any) -> Any:
        calls.append(f"{environ['REQUEST_METHOD']} {environ['PATH_INFO']}")
        return handler(environ, start_response)

    schema.app = app
    schema = schema.include(path_regex="^/api/locks")
    headers = {"Authorization": f"Token {token.key}"}
    requests: list[str] = []
    modes = list(schemathesis.GenerationMode)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {op.label for op in operations} == {
        "GET /api/locks",
        "GET /api/locks/{resource}",
        "POST /api/locks/{resource}",
        "DELETE /api/locks/{resource}",
        "POST /api/locks/{resource}/renew",
    }
    for operation in operations:
        for mode in modes:

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
                requests.append(f"{case.method} {case.formatted_path}")
                excluded = []
                if "cursor" in (case.query or {}):
                    # A cursor is opaque: one made up from the schema's "string"
                    # is rightly refused (400), which this check would count
                    # against the API. Every other check still runs.
                    excluded.append(positive_data_acceptance)
                case.call_and_validate(headers=headers, excluded_checks=excluded)

            run()
    record_property("schemathesis_cases", len(requests))
    record_property("schemathesis_calls", len(calls))
    assert len(calls) >= MIN_REQUESTS / 2  # two runs, staff and not


@pytest.fixture
def settings_fixture(settings: Any) -> Iterator[Any]:
    # Schemathesis's WSGI client sends "Host: localhost".
    settings.ALLOWED_HOSTS = ["localhost", "testserver"]
    served_schema()  # fetched by Django's test client, which reconnects the signals below
    # As Django's test client does: a request's end must not close the test's
    # connection (and its transaction).
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield settings
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)
