"""What a new user meets first: the example project's front page, and OPTIONS."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("rest_framework")

from django.contrib.auth.models import User

from tests.api_utils import client_for, run_in_example_project

ROOT = Path(__file__).resolve().parent.parent


def test_example_front_page_links_admin_docs_and_schema() -> None:
    output = run_in_example_project(
        """
        from django.contrib import admin
        page = client.get("/")
        assert page.status_code == 200, page.status_code
        html = page.content.decode()
        for link in ('href="/admin/"', 'href="/api/docs/"', 'href="/api/schema/"'):
            assert link in html, link
        # The admin's "View site" link goes to the front page, which exists.
        assert admin.site.site_url == "/"
        for link in ("/admin/", "/api/docs/", "/api/schema/"):
            status = client.get(link).status_code
            assert status in (200, 302), (link, status)  # the admin redirects to its login
        print("ok")
        """
    )
    assert output.strip() == "ok"


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/api/locks", "/api/locks/job", "/api/locks/job/renew"])
def test_options_describes_the_api_in_plain_text(path: str) -> None:
    client = client_for(User.objects.create_user("alice"))
    response = client.options(path)
    assert response.status_code == 200
    description = response.json()["description"]
    assert description.startswith("Distributed locks:")
    assert "``" not in description and "\n" not in description


def test_the_swagger_page_says_the_packages_version() -> None:
    from importlib.metadata import version

    output = run_in_example_project(
        """
        import json
        from django.conf import settings
        print(json.dumps(settings.SPECTACULAR_SETTINGS["VERSION"]))
        """
    )
    assert output.strip() == f'"{version("django-dlock")}"'


# The example project where prometheus_client is not installed: None in sys.modules makes
# find_spec() answer None and an import raise ModuleNotFoundError, as an absent package does.
WITHOUT = """
import sys
sys.modules["prometheus_client"] = None
"""


def test_the_example_runs_without_prometheus_client(tmp_path: Path) -> None:
    # The `api` extra alone is enough to start it: the metrics come with the `prometheus` one.
    script = WITHOUT + textwrap.dedent(
        """
        import django, os
        os.environ["DJANGO_SETTINGS_MODULE"] = "example_project.settings"
        django.setup()
        from django.core.management import call_command
        from django.test import Client
        from django.test.utils import setup_test_environment
        setup_test_environment()
        call_command("check")
        call_command("migrate", verbosity=0)
        client = Client()
        print(client.get("/").status_code, client.get("/metrics").status_code)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[-2:] == ["200", "404"]
