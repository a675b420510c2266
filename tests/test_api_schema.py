"""The served OpenAPI schema: valid OpenAPI 3, and it documents every route,
body, response and problem of the lock API. The example project serves it
with a Swagger UI page whose assets ship with the install."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("drf_spectacular")

from urllib.parse import parse_qs, urlsplit

from django.contrib.auth.models import User
from openapi_spec_validator import validate

from django_dlock.permissions import SEE_OWNERS_PERMISSION
from tests.api_utils import PROBLEM, client_for, post, run_in_example_project, served_schema

ROOT = Path(__file__).resolve().parent.parent
OPERATIONS = {
    ("/api/locks", "get"): {"200", "400", "401", "403", "404", "405", "406", "429"},
    ("/api/locks/{resource}", "get"): {"200", "400", "401", "403", "404", "405", "406", "429"},
    ("/api/locks/{resource}", "post"): {
        *("200", "400", "401", "403", "404", "405", "406", "409", "413", "415", "429"),
    },
    ("/api/locks/{resource}", "delete"): {
        *("200", "204", "400", "401", "403", "404", "405", "406", "413", "415", "429"),
    },
    ("/api/locks/{resource}/renew", "post"): {
        *("200", "400", "401", "403", "404", "405", "406", "409", "413", "415", "429"),
    },
}


def test_schema_is_valid_openapi() -> None:
    schema = served_schema()
    assert schema["openapi"].startswith("3.")
    validate(schema)


def test_schema_documents_every_operation_and_status() -> None:
    schema = served_schema()
    operations = {
        (path, method): set(operation["responses"])
        for path, item in schema["paths"].items()
        if path.startswith("/api/locks")
        for method, operation in item.items()
    }
    assert operations == OPERATIONS


def test_errors_are_documented_as_problems() -> None:
    for path, item in served_schema()["paths"].items():
        if not path.startswith("/api/locks"):
            continue
        for operation in item.values():
            for status, response in operation["responses"].items():
                if status >= "400":
                    assert list(response["content"]) == [PROBLEM], (path, status)
                    assert "urn:django-dlock:problem:" in response["description"]


def test_bodies_and_parameters_are_documented() -> None:
    schema = served_schema()
    paths, components = schema["paths"], schema["components"]["schemas"]

    def body(path: str, method: str) -> str:
        ref = paths[path][method]["requestBody"]["content"]["application/json"]["schema"]
        name: str = ref["$ref"].rsplit("/", 1)[-1]
        return name

    assert set(components[body("/api/locks/{resource}", "post")]["properties"]) == {
        "owner",
        "ttl",
        "reentrant",
        "shared",
        "limit",
        "label",
        "lock_delay",
    }
    assert components[body("/api/locks/{resource}/renew", "post")]["required"] == ["owner"]
    assert components[body("/api/locks/{resource}", "delete")]["required"] == ["owner"]
    acquire = paths["/api/locks/{resource}"]["post"]["responses"]["200"]
    assert "Retry-After" in acquire["headers"]
    listing = {p["name"] for p in paths["/api/locks"]["get"]["parameters"]}
    assert listing == {"prefix", "cursor", "page_size"}
    ttl = components["AcquireRequest"]["properties"]["ttl"]
    assert ttl["type"] == "number" and ttl["maximum"] == 86400
    delay = components["AcquireRequest"]["properties"]["lock_delay"]
    assert delay["type"] == "number" and delay["minimum"] == 0 and delay["maximum"] == 86400
    shown = components["Lock"]["properties"]["lock_delay"]
    assert shown["nullable"] is True and "lock_delay" in components["Lock"]["required"]


def test_the_label_pattern_refuses_what_the_label_rule_refuses() -> None:
    label = served_schema()["components"]["schemas"]["AcquireRequest"]["properties"]["label"]
    pattern = re.compile(label["pattern"])
    assert pattern.fullmatch("web-3 pid 4121") and pattern.fullmatch("")
    assert pattern.fullmatch("x" * 255) and not pattern.fullmatch("x" * 256)
    for refused in ("\u202eevil", "job\u200b", "a\nb", "a\u2028b"):
        assert not pattern.fullmatch(refused), refused


def _patterns(node: Any, where: str = "") -> Iterator[tuple[str, str]]:
    """Every ``pattern`` of the schema, with where it is."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "pattern" and isinstance(value, str):
                yield where, value
            else:
                yield from _patterns(value, f"{where}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _patterns(value, f"{where}/{index}")


def _parameter_pattern(schema: dict[str, Any], path: str, name: str) -> str:
    item = schema["paths"][path]
    operations = [item, *(o for o in item.values() if isinstance(o, dict))]
    [pattern] = {
        parameter["schema"]["pattern"]
        for operation in operations
        for parameter in operation.get("parameters", [])
        if parameter["name"] == name
    }
    return str(pattern)


def test_every_pattern_compiles_and_agrees_with_the_validator_of_its_name() -> None:
    # A JSON Schema pattern matches anywhere in the value unless anchored: one that allows what
    # the server refuses sends clients (and schemathesis) requests that answer 400.
    from django.core.exceptions import ValidationError

    from django_dlock.validators import validate_resource, validate_throttle_key

    schema = served_schema()
    found = list(_patterns(schema))
    assert found
    for where, pattern in found:
        assert pattern.startswith("^") and pattern.endswith("$"), where
        re.compile(pattern)
    resource = _parameter_pattern(schema, "/api/locks/{resource}", "resource")
    key = _parameter_pattern(schema, "/api/throttles/{key}", "key")
    names = ["job:42", "billing.nightly", "x" * 255, "\u03a9mega", "\U0001f512", "a b"]
    names += ["a/b", "", "x" * 256, "a\tb", "job\u200b", "a\nb", "\u202eevil", " lead"]
    for pattern, check in ((resource, validate_resource), (key, validate_throttle_key)):
        for name in names:
            try:
                check(name)
            except ValidationError:
                valid = False
            else:
                valid = True
            assert bool(re.search(pattern, name)) == valid, (check.__name__, name)


def test_acquire_and_renew_link_to_the_calls_that_use_the_lock() -> None:
    paths = served_schema()["paths"]
    for path, method in [
        ("/api/locks/{resource}", "post"),
        ("/api/locks/{resource}/renew", "post"),
    ]:
        links = paths[path][method]["responses"]["200"]["links"]
        assert {name: link["operationId"] for name, link in links.items()} == {
            "ReadLock": "locks_retrieve",
            "RenewLock": "locks_renew",
            "ReleaseLock": "locks_release",
        }
        assert links["ReleaseLock"]["requestBody"] == {"owner": "$response.body#/owner"}
        assert links["ReadLock"]["parameters"] == {"resource": "$request.path.resource"}


def test_throttled_answers_document_retry_after() -> None:
    for path, item in served_schema()["paths"].items():
        if path.startswith("/api/locks"):
            for operation in item.values():
                assert "Retry-After" in operation["responses"]["429"]["headers"], path


def lock_operations() -> list[dict[str, Any]]:
    return [
        operation
        for path, item in served_schema()["paths"].items()
        if path.startswith("/api/locks")
        for operation in item.values()
    ]


def test_owner_is_described_as_the_code_decides_who_sees_it() -> None:
    owner = served_schema()["components"]["schemas"]["Lock"]["properties"]["owner"]
    assert SEE_OWNERS_PERMISSION in owner["description"]
    assert "staff users only" not in owner["description"]


def test_fencing_tokens_are_64_bit_wherever_they_appear() -> None:
    components = served_schema()["components"]["schemas"]
    with_token = [
        name for name, c in components.items() if "fencing_token" in c.get("properties", {})
    ]
    assert sorted(with_token) == ["Acquired", "Hold", "Lock", "OwnedLock"]
    for name in with_token:
        token = components[name]["properties"]["fencing_token"]
        assert (token["type"], token["format"], token["minimum"]) == ("integer", "int64", 1), name


def test_a_page_always_carries_next_and_previous() -> None:
    page = served_schema()["components"]["schemas"]["PaginatedLockList"]
    assert sorted(page["required"]) == ["next", "previous", "results"]
    for link in ("next", "previous"):
        example = page["properties"][link]["example"]
        url = urlsplit(example)
        assert url.scheme == "https" and url.path == "/api/locks", example
        assert list(parse_qs(url.query)) == ["cursor"], example
        assert '"' not in example


def test_invalid_input_names_every_input_the_api_reads_and_no_other() -> None:
    """The names under ``errors`` are the path and query parameters of the lock
    operations, the fields of their bodies, and "body": a new parameter or
    field without its name there fails here (and every response the API tests
    see is checked against ``additionalProperties: false``)."""
    schema = served_schema()
    components = schema["components"]["schemas"]
    errors = components["InvalidInputErrors"]
    assert errors["additionalProperties"] is False
    problem = components["InvalidInputProblem"]["properties"]["errors"]
    assert problem["allOf"] == [{"$ref": "#/components/schemas/InvalidInputErrors"}]
    inputs = {"body"}
    for operation in lock_operations():
        inputs |= {p["name"] for p in operation.get("parameters", []) if p["in"] != "header"}
        body = operation.get("requestBody")
        if body:
            ref = body["content"]["application/json"]["schema"]["$ref"]
            inputs |= set(components[ref.rsplit("/", 1)[-1]]["properties"])
    assert set(errors["properties"]) == inputs
    assert "page_size" in inputs


@pytest.mark.django_db
def test_each_name_of_errors_is_one_an_answer_uses() -> None:
    api = client_for(User.objects.create_user("alice"))
    answers = [
        post(api, "/api/locks/a%20b", {}),
        post(api, "/api/locks/job", {"owner": ""}),
        post(api, "/api/locks/job", {"ttl": -1}),
        post(api, "/api/locks/job", {"reentrant": "yes"}),
        post(api, "/api/locks/job", {"shared": 1}),
        post(api, "/api/locks/job", {"limit": 0}),
        post(api, "/api/locks/job", {"label": "a\nb"}),
        post(api, "/api/locks/job", {"lock_delay": -1}),
        post(api, "/api/locks/job", [1]),
        api.get("/api/locks?prefix=a%20b"),
        api.get("/api/locks?cursor=made-up"),
        api.get("/api/locks?page_size=0"),
    ]
    used = set()
    for answer in answers:
        assert answer.status_code == 400, answer.content
        used |= set(answer.json()["errors"])
    documented = served_schema()["components"]["schemas"]["InvalidInputErrors"]["properties"]
    assert used == set(documented)


def test_headers_of_the_answers_are_declared() -> None:
    for operation in lock_operations():
        responses = operation["responses"]
        for status, header in [
            ("401", "WWW-Authenticate"),
            ("405", "Allow"),
            ("429", "Retry-After"),
        ]:
            assert responses[status]["headers"][header]["required"] is True, (status, header)
        assert responses["429"]["headers"]["Retry-After"]["schema"]["minimum"] == 1
    acquire = served_schema()["paths"]["/api/locks/{resource}"]["post"]["responses"]["200"]
    retry_after = acquire["headers"]["Retry-After"]
    assert retry_after["schema"] == {"type": "integer", "minimum": 1}
    assert not retry_after.get("required")  # only with acquired false


def test_example_project_serves_schema_and_offline_docs() -> None:
    output = run_in_example_project(
        """
        from django.contrib.staticfiles import finders
        schema = client.get("/api/schema/", HTTP_ACCEPT="application/json")
        assert schema.status_code == 200, schema.status_code
        # The lock and throttle API, and not the view that serves the schema.
        paths = sorted(schema.json()["paths"])
        assert paths == [
            "/api/locks", "/api/locks/{resource}", "/api/locks/{resource}/renew",
            "/api/throttles/{key}",
        ], paths
        docs = client.get("/api/docs/")
        assert docs.status_code == 200, docs.status_code
        html = docs.content.decode()
        assert "https://" not in html.replace("https://swagger.io", ""), html
        assert "drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in html
        assert finders.find("drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js")
        print("ok")
        """
    )
    assert output.strip() == "ok"
