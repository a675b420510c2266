"""An encoded ``/`` under real servers, started by the test as processes of
their own: gunicorn (WSGI, which passes the raw path as ``RAW_URI``) and
uvicorn (ASGI, ``scope["raw_path"]``). ``R%2Frenew`` is a 400 naming the
resource, never a renew of ``R``; ``a%252Fb`` (the name ``a%2Fb``) still works.
Requests go through ``http.client``, which sends the path exactly as given."""

from __future__ import annotations

import http.client
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("rest_framework")

from django.contrib.auth.models import User
from django.db import connection
from rest_framework.authtoken.models import Token

from tests.api_servers import TEST_APPS, serving
from tests.api_utils import PROBLEM

pytestmark = pytest.mark.django_db(transaction=True)

STARTUP_AND_ANSWER = 60  # seconds: the first answer waits for the server to boot


class Server:
    """Sends requests to the server process with a user's token."""

    def __init__(self, port: int, token: str) -> None:
        self.port = port
        self.headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}

    def send(self, method: str, path: str, body: Any = None) -> tuple[int, str, Any]:
        """(status, content type, decoded JSON body or None)."""
        client = http.client.HTTPConnection("127.0.0.1", self.port, timeout=STARTUP_AND_ANSWER)
        try:
            data = None if body is None else json.dumps(body)
            client.request(method, path, body=data, headers=self.headers)
            response = client.getresponse()
            content = response.read()
            return (
                response.status,
                response.getheader("Content-Type", ""),
                json.loads(content) if content else None,
            )
        finally:
            client.close()


@pytest.fixture(params=list(TEST_APPS))
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Server]:
    token = Token.objects.create(user=User.objects.create_user("alice")).key
    env = {**os.environ, "DLOCK_SERVER_DATABASE_NAME": str(connection.settings_dict["NAME"])}
    app = TEST_APPS[request.param]
    with serving(request.param, app, env, tmp_path / "server.log") as port:
        yield Server(port, token)


def refused(answer: tuple[int, str, Any], field: str = "resource") -> str:
    status, content_type, body = answer
    assert status == 400, answer
    assert content_type == PROBLEM
    assert body["type"] == "urn:django-dlock:problem:invalid-input"
    assert list(body["errors"]) == [field], body
    detail: str = body["detail"]
    return detail


def test_an_encoded_slash_is_refused_and_changes_nothing(server: Server) -> None:
    status, _, held = server.send("POST", "/api/locks/R", {"owner": "o", "ttl": 30})
    assert status == 200 and held["acquired"], held

    for method, path in [
        ("POST", "/api/locks/R%2Frenew"),  # would renew R
        ("POST", "/api/locks/R%2frenew/"),
        ("DELETE", "/api/locks/R%2Frenew"),  # would be a 405 of the renew route
        ("POST", "/api/locks/a%2Fb"),  # would be a 404
        ("GET", "/api/locks/a%2Fb"),
        ("DELETE", "/api/locks/x%2F..%2FR"),
    ]:
        detail = refused(server.send(method, path, {"owner": "o", "ttl": 600}))
        assert "'/'" in detail and "%2F" in detail, detail

    status, _, now = server.send("GET", "/api/locks/R")
    assert status == 200
    assert now["expires_at"] == held["expires_at"]  # not renewed
    status, _, page = server.send("GET", "/api/locks")
    assert [lock["resource"] for lock in page["results"]] == ["R"]


def test_what_is_not_an_encoded_slash_still_works(server: Server) -> None:
    status, _, lock = server.send("POST", "/api/locks/a%252Fb", {"owner": "o"})
    assert (status, lock["resource"]) == (200, "a%2Fb")
    status, _, lock = server.send("POST", "/api/locks/R", {"owner": "o"})
    assert status == 200
    status, _, renewed = server.send("POST", "/api/locks/R/renew", {"owner": "o", "ttl": 90})
    assert (status, renewed["resource"]) == (200, "R")
    status, content_type, body = server.send("GET", "/api/locks/a/b")
    assert (status, content_type, body["type"]) == (
        404,
        PROBLEM,
        "urn:django-dlock:problem:not-found",
    )


def test_a_path_that_is_not_utf8_is_refused_and_a_literal_percent_works(server: Server) -> None:
    detail = refused(server.send("POST", "/api/locks/a%ED%A0%80b", {"owner": "o"}))
    assert "UTF-8" in detail
    status, _, lock = server.send("POST", "/api/locks/a%25ED%25A0%2580b", {"owner": "o"})
    assert (status, lock["resource"]) == (200, "a%ED%A0%80b")
