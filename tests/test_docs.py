"""The documentation documents what the code has, and the README works as the PyPI page and as
a new project's first steps."""

from __future__ import annotations

import importlib.util
import re
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

from django_dlock import signals
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


# -- the pages as a reader meets them ------------------------------------------------------------

# A page a reader can take in; the performance page answers a few questions, no more.
PAGE_LINES = 400
PAGE_LINES_OF = {"performance.md": 250}
# The summary under a page's title says what the page covers, in a few lines.
SUMMARY_LINES = 4
# docs/internals.md is being rewritten elsewhere: its summary's length is not judged here yet.
SUMMARY_UNJUDGED = {"internals.md"}


def site_pages() -> dict[str, str]:
    """Each page of the site as a reader gets it: the changelog page is CHANGELOG.md, which it
    includes."""
    return {
        path.name: (ROOT / "CHANGELOG.md" if path.name == "changelog.md" else path).read_text()
        for path in sorted(DOCS.glob("*.md"))
    }


def test_no_page_is_too_long() -> None:
    for path in sorted(DOCS.glob("*.md")):
        limit = PAGE_LINES_OF.get(path.name, PAGE_LINES)
        lines = len(path.read_text().splitlines())
        assert lines <= limit, f"docs/{path.name} has {lines} lines, more than {limit}"


def test_every_page_opens_with_a_title_and_a_summary() -> None:
    for name, text in site_pages().items():
        lines = text.splitlines()
        assert lines[0].startswith("# "), f"{name} does not open with a title"
        assert lines[1] == "", f"{name}: no blank line after the title"
        summary = []
        for line in lines[2:]:
            if not line.strip():
                break
            summary.append(line)
        assert summary, f"{name} has no summary under its title"
        assert not re.match(r"(#|```|\||- |\* |!\[|<|:::|--8<--)", summary[0]), (
            f"{name} opens with something other than a paragraph: {summary[0]!r}"
        )
        if name not in SUMMARY_UNJUDGED:
            assert len(summary) <= SUMMARY_LINES, (
                f"{name}'s summary has {len(summary)} lines, more than {SUMMARY_LINES}"
            )


def hooks() -> ModuleType:
    """docs/hooks.py, the site's MkDocs hooks (mkdocs.yml's ``hooks:``). It needs Markdown,
    which the `docs` group brings (the matrix's environments have only the `test` group)."""
    pytest.importorskip("markdown")
    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_site_hides_the_example_markers() -> None:
    """A page as MkDocs renders it has its tested blocks without their ``# example: NAME``
    lines (also a block indented in a list item), and nothing else of them changed; the
    source keeps the markers that the tests find the blocks by."""
    source = (
        page("usage.md") + "\n- In a list:\n\n  ```python\n  # example: indented\n  x = 1\n  ```\n"
    )
    blocks = python_blocks(source)
    marked = [code for code in blocks if code.startswith("# example: ")]
    assert len(marked) >= 4
    rendered = hooks().on_page_markdown(source, page=None, config=None, files=None)
    assert "# example:" not in rendered
    assert python_blocks(rendered) == [
        code.split("\n", 1)[1] if code.startswith("# example: ") else code for code in blocks
    ]
    assert example("script")[0] == "usage.md"  # the source still has it


def test_the_site_hides_the_example_markers_of_included_files() -> None:
    """The quickstart page includes README.md's examples, which pymdownx.snippets inserts after
    the page hook ran: the hooks' Markdown extension strips their markers then."""
    hooks_module = hooks()
    markdown = pytest.importorskip("markdown")
    pytest.importorskip("pymdownx")
    source = page("quickstart.md")
    assert '--8<-- "README.md:quickstart"' in source
    assert "# example: quickstart" in page("README.md")
    html = markdown.markdown(
        source,
        extensions=["pymdownx.snippets", "pymdownx.superfences", hooks_module.ExampleMarkers()],
        extension_configs={"pymdownx.snippets": {"base_path": [str(ROOT)], "check_paths": True}},
    )
    assert "close_month" in html  # the README's example is there
    assert "# example:" not in html


# -- the Python API page -------------------------------------------------------------------------


def test_the_python_api_page_documents_every_public_name() -> None:
    import django_dlock
    from django_dlock import exceptions

    text = page("python-api.md")
    directives = re.findall(r"^::: ([\w.]+)$", text, re.M)
    documented = {path.rsplit(".", 1)[-1] for path in directives}
    for name in django_dlock.__all__:
        if hasattr(exceptions, name):
            assert "django_dlock.exceptions" in directives, name
        else:
            assert name in documented, f"django_dlock.{name} is not on docs/python-api.md"
    for name in ("DistributedLockManager", "DistributedLockQuerySet", "LockHandle"):
        assert name in documented, name


def test_the_python_api_page_lists_every_signal() -> None:
    from django.dispatch import Signal

    sent = {name for name, value in vars(signals).items() if isinstance(value, Signal)}
    assert sent
    listed = re.search(
        r"::: django_dlock\.signals\n(?:    .*\n)*?\s+members: \[(.*)\]", page("python-api.md")
    )
    assert listed is not None
    assert {name.strip() for name in listed.group(1).split(",")} == sent
    # Each one's docstring (the string after it, which the page shows) names its arguments.
    source = (ROOT / "django_dlock" / "signals.py").read_text()
    for name in sent:
        doc = re.search(rf'^{name} = Signal\(.*\)\n"""(.*?)"""', source, re.M | re.S)
        assert doc is not None and "Keyword arguments:" in doc.group(1), name


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


def test_internals_names_only_what_exists() -> None:
    """docs/internals.md walks through the code: each file, class, function and
    attribute it names in backticks is there (it once walked through classes
    that had been removed)."""
    import re

    package = ROOT / "django_dlock"
    sources = {path: path.read_text() for path in package.rglob("*.py")}
    everything = "\n".join(sources.values())
    text = re.sub(r"```.*?```", "", (ROOT / "docs" / "internals.md").read_text(), flags=re.S)
    missing = []
    # Django's own names, and placeholders (``backends/<vendor>/``), are not ours.
    named = re.findall(r"(Django's\s+)?`([^`\s<]+)`", text)
    for name in sorted({name for django, name in named if not django}):
        bare = name.removesuffix("()")
        if bare.endswith(".py"):
            if not (ROOT / bare).exists() and not (package / bare).exists():
                missing.append(name)
        elif re.fullmatch(r"[A-Za-z_]\w*\.\w+", bare):
            owner, attribute = bare.split(".")
            homes = [
                text for text in sources.values() if re.search(rf"^class {owner}\b", text, re.M)
            ]
            if not any(re.search(rf"\b{attribute}\b", home) for home in homes):
                missing.append(name)
        elif re.fullmatch(r"[A-Z][a-z]\w*", bare):  # a class
            if not re.search(rf"^class {bare}\b", everything, re.M):
                missing.append(name)
        elif re.fullmatch(r"[A-Za-z_]\w*", bare) and not re.search(rf"\b{bare}\b", everything):
            missing.append(name)  # a function, constant or attribute
    assert missing == []
