"""Helpers of the API tests: clients, and a check of every response against
the OpenAPI schema that the test project serves."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import textwrap
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.test import Client
from django.urls import resolve
from openapi_schema_validator import OAS30Validator, validate
from rest_framework.test import APIClient

if TYPE_CHECKING:
    from django.contrib.auth.models import User

PROBLEM = "application/problem+json"
SCHEMA_URL = "/api/schema/?format=json"

# URL names of the lock API → the schema's path templates.
TEMPLATES = {
    "lock-list": "/api/locks",
    "lock-detail": "/api/locks/{resource}",
    "lock-renew": "/api/locks/{resource}/renew",
    "throttle-use": "/api/throttles/{key}",
}


def served_schema() -> dict[str, Any]:
    """The OpenAPI document the test project serves, fetched once for each
    DLOCK_MAX_TTL it documents (a test that changes the setting would else
    leave its schema to every test after it in the same process)."""
    from django_dlock.conf import conf

    return _served_schema(conf.MAX_TTL)


@cache
def _served_schema(max_ttl: float) -> dict[str, Any]:
    response = Client().get(SCHEMA_URL)
    assert response.status_code == 200, response.content
    schema: dict[str, Any] = json.loads(response.content)
    return schema


def _inline_refs(node: Any, components: dict[str, Any]) -> Any:
    if isinstance(node, dict):
        if "$ref" in node:
            name = node["$ref"].rsplit("/", 1)[-1]
            return _inline_refs(copy.deepcopy(components[name]), components)
        return {key: _inline_refs(value, components) for key, value in node.items()}
    if isinstance(node, list):
        return [_inline_refs(item, components) for item in node]
    return node


def assert_matches_schema(response: Any) -> None:
    """The response is one the schema documents for its operation: status code,
    media type, body and headers."""
    schema = served_schema()
    match = resolve(response.wsgi_request.path_info)
    template = TEMPLATES.get(match.url_name or "")
    method = response.wsgi_request.method.lower()
    operation = None if template is None else schema["paths"][template].get(method)
    if operation is None and (template is None or method != "options"):
        # A path of no operation (locks/a/b): a 404 problem; a method the route
        # does not take: a 405 one. Either is a 400 naming the resource where the
        # server kept the raw path and it shows an encoded "/" (locks/R%2Frenew).
        assert response.status_code in (400, 404 if template is None else 405), (
            method,
            template,
            response.status_code,
        )
        assert response["Content-Type"] == PROBLEM
        if response.status_code == 400:
            named = "key" if "/throttles/" in response.wsgi_request.path_info else "resource"
            assert list(json.loads(response.content)["errors"]) == [named]
        return
    if method == "options":  # DRF's metadata: no operation of the schema
        assert response["Content-Type"] == "application/json"
        return
    assert template is not None and operation is not None
    documented = operation["responses"].get(str(response.status_code))
    assert documented is not None, (
        f"{method.upper()} {template} answered {response.status_code}, which the schema "
        f"does not document: {response.content!r}"
    )
    components = schema["components"]["schemas"]
    content = documented.get("content")
    if content is None:
        assert response.content == b""
    else:
        media_type = response["Content-Type"].split(";")[0]
        assert media_type in content, (media_type, list(content))
        body_schema = _inline_refs(content[media_type]["schema"], components)
        validate(
            json.loads(response.content),
            body_schema,
            cls=OAS30Validator,
            format_checker=OAS30Validator.FORMAT_CHECKER,
        )
    for name, header in documented.get("headers", {}).items():
        if name not in response.headers:
            assert not header.get("required"), f"no {name} header, which the schema requires"
            continue
        value = response[name]
        validate(
            int(value) if header["schema"]["type"] == "integer" else value,
            header["schema"],
            cls=OAS30Validator,
        )


class CheckedClient(APIClient):
    """An APIClient whose every response is checked against the served schema."""

    def request(self, **kwargs: Any) -> Any:
        response = super().request(**kwargs)
        if response.wsgi_request.path_info.startswith(("/api/locks", "/api/throttles")):
            assert_matches_schema(response)
        return response


def problem(response: Any, status: int, slug: str) -> dict[str, Any]:
    """The response's problem body, after checking that it is one of ``slug``."""
    assert response.status_code == status, response.content
    assert response["Content-Type"] == PROBLEM
    body: dict[str, Any] = json.loads(response.content)
    assert body["type"] == f"urn:django-dlock:problem:{slug}", body
    assert body["status"] == status
    assert body["title"]
    assert body["detail"]
    return body


def client_for(user: User | None) -> CheckedClient:
    """A checked client, authenticated with a token of ``user`` (anonymous for None)."""
    from rest_framework.authtoken.models import Token

    client = CheckedClient()
    if user is not None:
        token = Token.objects.create(user=user)
        client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


def user_with_permissions(username: str, *codenames: str, **fields: Any) -> User:
    """A user holding the named permissions (codenames of django_dlock's model)."""
    from django.contrib.auth.models import Permission, User

    user = User.objects.create_user(username, **fields)
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="django_dlock", codename__in=codenames)
    )
    return user


def post(client: APIClient, path: str, body: Any = None) -> Any:
    return send(client, "POST", path, body)


def delete(client: APIClient, path: str, body: Any) -> Any:
    return send(client, "DELETE", path, body)


def send(client: APIClient, method: str, path: str, body: Any) -> Any:
    if body is None:
        return client.generic(method, path)
    # json.dumps escapes what UTF-8 cannot carry (a lone surrogate is valid JSON).
    return client.generic(method, path, json.dumps(body), content_type="application/json")


EXAMPLE_SETUP = """
import django, os
os.environ["DJANGO_SETTINGS_MODULE"] = "example_project.settings"
django.setup()
from django.test import Client
from django.test.utils import setup_test_environment
setup_test_environment()
client = Client()
"""


def run_in_example_project(script: str, **env: str) -> str:
    """Run ``script`` in a process of its own, under the example project's settings
    (after ``django.setup()``, with a test ``client``); return what it printed."""
    result = subprocess.run(
        [sys.executable, "-c", EXAMPLE_SETUP + textwrap.dedent(script)],
        cwd=Path(__file__).resolve().parent.parent,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout
