"""The served OpenAPI schema: valid OpenAPI 3, and it documents every route,
body, response and problem of the lock API. The example project serves it
with a Swagger UI page whose assets ship with the install."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("drf_spectacular")

from openapi_spec_validator import validate

from tests.api_utils import PROBLEM, served_schema

ROOT = Path(__file__).resolve().parent.parent
OPERATIONS = {
    ("/api/locks", "get"): {"200", "400", "401", "403", "404", "405", "406", "429"},
    ("/api/locks/{resource}", "get"): {"200", "400", "401", "403", "404", "405", "406", "429"},
    ("/api/locks/{resource}", "post"): {
        *("200", "400", "401", "403", "404", "405", "406", "415", "429"),
    },
    ("/api/locks/{resource}", "delete"): {
        *("204", "400", "401", "403", "404", "405", "406", "415", "429"),
    },
    ("/api/locks/{resource}/renew", "post"): {
        *("200", "400", "401", "403", "404", "405", "406", "409", "415", "429"),
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


def test_example_project_serves_schema_and_offline_docs() -> None:
    """In a process of its own: the example project has its own settings."""
    script = textwrap.dedent(
        """
        import django, os
        os.environ["DJANGO_SETTINGS_MODULE"] = "example_project.settings"
        django.setup()
        from django.contrib.staticfiles import finders
        from django.test import Client
        from django.test.utils import setup_test_environment
        setup_test_environment()
        client = Client()
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
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
