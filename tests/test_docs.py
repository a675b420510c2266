"""The documentation documents what the code has, and the README works as the PyPI page and as
a new project's first steps."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from django_dlock.conf import Settings
from tests.docs_utils import (
    DOCS,
    ROOT,
    example,
    new_project,
    page,
    python_blocks,
    run_in_project,
    section,
)

pytestmark = pytest.mark.vendor_independent

README = page("README.md")
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


# -- the reference pages -------------------------------------------------------------------------


def test_every_setting_is_documented() -> None:
    settings = [name for name, value in vars(Settings).items() if isinstance(value, property)]
    assert settings
    text = page("settings.md")
    for name in settings:
        assert f"## `DLOCK_{name}`" in text, f"DLOCK_{name} has no section in docs/settings.md"
        assert f"[`DLOCK_{name}`](#dlock_{name.lower()})" in text, (
            f"DLOCK_{name} is not in the table"
        )


def test_every_page_is_in_the_nav() -> None:
    # mkdocs --strict fails on a page left out of the nav too; this says which, without mkdocs.
    nav = (ROOT / "mkdocs.yml").read_text()
    for path in DOCS.glob("*.md"):
        assert f": {path.name}\n" in nav, f"{path.name} is not in mkdocs.yml's nav"


def test_the_changelog_and_quickstart_pages_include_rather_than_copy() -> None:
    assert page("changelog.md").strip() == '--8<-- "CHANGELOG.md"'
    assert '--8<-- "README.md:quickstart"' in page("quickstart.md")
    assert "<!-- --8<-- [start:quickstart] -->" in README
    assert "<!-- --8<-- [end:quickstart] -->" in README


# -- the README as the PyPI page -----------------------------------------------------------------


def test_readme_is_short() -> None:
    assert len(README.splitlines()) <= 200


def test_readme_has_no_relative_links_or_images() -> None:
    # PyPI shows the README without the repository around it: every link and image must be an
    # absolute URL (a heading's #anchor does not survive either).
    targets = [
        *re.findall(r"\]\(\s*<?([^)\s>]+)", README),  # [text](target), ![alt](target)
        *re.findall(r"^\s*\[[^\]]+\]:\s*(\S+)", README, re.M),  # [label]: target
        *re.findall(r"""(?:href|src)\s*=\s*["']([^"']+)""", README),  # HTML
    ]
    assert targets
    relative = [target for target in targets if not target.startswith("https://")]
    assert relative == []


def test_readme_keeps_the_two_commands_from_a_clone_near_the_top() -> None:
    headings = re.findall(r"^## (.+)$", README, re.M)
    assert headings.index("From a clone") < headings.index("Requirements")
    clone = section(README, "## From a clone")
    assert "bash scripts/example.sh   # run the example project on SQLite" in clone
    assert "bash scripts/test.sh      # lint, type-check, then every test" in clone
    assert "not the package from PyPI" in clone


def test_readme_says_how_to_call_the_examples_api(tmp_path: Path) -> None:
    # Without a token the example's API answers 401: the README gives the way in, and it works
    # on the example project as scripts/example.sh leaves it (a superuser admin).
    pytest.importorskip("rest_framework")
    from tests.api_utils import run_in_example_project

    clone = section(README, "## From a clone")
    command = re.search(r"`(?:\.venv/bin/)?python manage\.py (drf_create_token admin)`", clone)
    curl = re.search(
        r'`curl -H "Authorization: Token <token>" http://127\.0\.0\.1:8000(/\S+)`', clone
    )
    assert command is not None and curl is not None, clone
    output = run_in_example_project(
        f"""
        import io, re
        from django.contrib.auth.models import User
        from django.core.management import call_command
        call_command("migrate", verbosity=0)
        User.objects.create_superuser("admin", "admin@example.com", "admin")
        out = io.StringIO()
        call_command(*{command.group(1).split()!r}, stdout=out)
        token = re.search(r"Generated token (\\w+)", out.getvalue()).group(1)
        print(client.get({curl.group(1)!r}).status_code)
        print(client.get({curl.group(1)!r}, HTTP_AUTHORIZATION="Token " + token).status_code)
        """,
        DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
    )
    assert output.split() == ["401", "200"]


def test_readme_names_every_extra() -> None:
    extras = set(PYPROJECT["project"]["optional-dependencies"])
    install = section(README, "## Installation")
    for extra in extras - {"openapi"}:
        assert f'"django-dlock[{extra}]"' in install, extra
    assert "`openapi` is another name for `api`" in install


def test_pyproject_names_the_project_urls() -> None:
    urls = PYPROJECT["project"]["urls"]
    assert set(urls) == {"Homepage", "Documentation", "Source", "Changelog", "Issues"}
    assert all(url.startswith("https://") for url in urls.values())
    for name in ("Documentation", "Source", "Changelog"):
        assert urls[name] in README, f"the README does not link {name}: {urls[name]}"


def test_the_app_creates_the_tables_the_readme_names() -> None:
    from django.apps import apps

    tables = sorted(
        model._meta.db_table
        for model in apps.get_app_config("django_dlock").get_models()
        if not model._meta.proxy  # the admin's view of a table, not a table
    )
    quickstart = section(README, "## Quickstart")
    assert (
        f"creates {['one', 'two', 'three', 'four', 'five'][len(tables) - 1]} tables" in quickstart
    )
    for table in tables:
        assert f"`{table}`" in quickstart


# -- the README's quickstart, copied into a new project -------------------------------------------


def test_the_quickstart_works_in_a_new_project(tmp_path: Path) -> None:
    """A reader's new project: `startproject`, the quickstart's settings, migrate; then `manage.py
    check` has nothing to say (no W001 for SQLite's transactions), and both examples run."""
    quickstart = section(README, "## Quickstart")
    [settings, *_] = python_blocks(quickstart)
    assert settings.startswith("INSTALLED_APPS = [...,")
    project = new_project(tmp_path, settings=settings)
    examples = {name: example(name)[1] for name in ("quickstart", "quickstart manager")}
    output = run_in_project(
        project,
        f"""
        from django.core.management import call_command
        from django_dlock.models import DistributedLock

        call_command("migrate", verbosity=0)
        call_command("check", fail_level="WARNING")

        ran = []
        quickstart = {{"post_invoices": lambda month, fencing_token: ran.append(fencing_token)}}
        exec({examples["quickstart"]!r}, quickstart)
        assert quickstart["close_month"]("2026-05") is True
        manager = {{"run_job": lambda job_id, fencing_token: ran.append(fencing_token)}}
        exec({examples["quickstart manager"]!r}, manager)
        manager["run_job_once"](42)
        assert len(ran) == 2 and all(token >= 1 for token in ran), ran
        assert not DistributedLock.objects.active().exists()
        print("ok")
        """,
    )
    assert output.strip().splitlines()[-1] == "ok"
