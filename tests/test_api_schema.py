"""The served OpenAPI schema: valid OpenAPI 3, and it documents every route,
body, response and problem of the lock API. The example project serves it
with a Swagger UI page whose assets ship with the install."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("drf_spectacular")

from openapi_spec_validator import validate

from tests.api_utils import PROBLEM, run_in_example_project, served_schema

ROOT = Path(__file__).resolve().parent.parent
OPERATIONS = {
    ("/api/locks", "get"): {"200", "400", "401", "403", "404", "405", "406", "429"},
    ("/api/locks/{resource}", "get"): {"200", "400", "401", "403", "404", "405", "406", "429"},
    ("/api/locks/{resource}", "post"): {
        *("200", "400", "401", "403", "404", "405", "406", "413", "415", "429"),
    },
    ("/api/locks/{resource}", "delete"): {
        *("204", "400", "401", "403", "404", "405", "406", "413", "415", "429"),
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
    }
    assert components[body("/api/locks/{resource}/renew", "post")]["required"] == ["owner"]
    assert components[body("/api/locks/{resource}", "delete")]["required"] == ["owner"]
    acquire = paths["/api/locks/{resource}"]["post"]["responses"]["200"]
    assert "Retry-After" in acquire["headers"]
    listing = {p["name"] for p in paths["/api/locks"]["get"]["parameters"]}
    assert listing == {"prefix", "cursor", "page_size"}
    ttl = components["AcquireRequest"]["properties"]["ttl"]
    assert ttl["type"] == "number" and ttl["maximum"] == 86400


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


def test_example_project_serves_schema_and_offline_docs() -> None:
    output = run_in_example_project(
        """
        from django.contrib.staticfiles import finders
        schema = client.get("/api/schema/", HTTP_ACCEPT="application/json")
        assert schema.status_code == 200, schema.status_code
        assert "/api/locks/{resource}/renew" in schema.json()["paths"]
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
