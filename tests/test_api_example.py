"""What a new user meets first: the example project's front page, and OPTIONS."""

from __future__ import annotations

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
