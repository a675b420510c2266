"""Helpers of the tests that run the documentation: its code blocks, and new projects made with
``django-admin startproject`` that a page's settings snippets are added to, as a reader would."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"


def page(name: str) -> str:
    """The text of ``README.md`` or of a page under ``docs/`` (``"api.md"``)."""
    return (README if name == "README.md" else DOCS / name).read_text()


def pages() -> dict[str, str]:
    """Every page that holds examples: the README and the docs site's pages."""
    return {"README.md": page("README.md")} | {
        path.name: path.read_text() for path in sorted(DOCS.glob("*.md"))
    }


def section(text: str, heading: str) -> str:
    """The section under ``heading`` (a whole heading line, e.g. ``"## Set up"``), up to the
    next heading of the same or a higher level."""
    level = len(heading.split(" ", 1)[0])
    lines = text.splitlines(keepends=True)
    start = lines.index(heading + "\n")
    in_code = False
    for end in range(start + 1, len(lines)):
        line = lines[end]
        if line.lstrip().startswith("```"):
            in_code = not in_code
        elif not in_code and re.match(rf"#{{1,{level}}} ", line):
            return "".join(lines[start:end])
    return "".join(lines[start:])


def python_blocks(text: str) -> list[str]:
    """The ```python blocks of ``text``, dedented (some sit in list items)."""
    return [textwrap.dedent(code) for code in re.findall(r"```python\n(.*?)```", text, re.S)]


def example(name: str) -> tuple[str, str]:
    """The one code block that starts with ``# example: <name>``, wherever it is: its page's
    name and its code."""
    found = [
        (page_name, code)
        for page_name, text in pages().items()
        for code in python_blocks(text)
        if code.startswith(f"# example: {name}\n")
    ]
    assert len(found) == 1, f"{len(found)} blocks are '# example: {name}'"
    return found[0]


def run_example(name: str, **stand_ins: Any) -> dict[str, Any]:
    """Execute the block ``# example: <name>`` with ``stand_ins`` for the project's own
    functions; its namespace."""
    page_name, code = example(name)
    namespace: dict[str, Any] = {"__name__": f"docs_{name.replace(' ', '_')}", **stand_ins}
    exec(compile(code, f"{page_name} ({name})", "exec"), namespace)  # noqa: S102 - our docs
    return namespace


def as_addition(snippet: str) -> str:
    """A settings or URLconf snippet that elides the project's own entries (``X = [..., a]``),
    made to add to them (``X = [*X, a]``)."""
    return re.sub(r"^(\w+) = \[\s*\.\.\.,\s*", r"\1 = [*\1, ", snippet, flags=re.M)


def new_project(directory: Path, *, settings: str = "", urls: str = "") -> Path:
    """``django-admin startproject mysite`` in ``directory``, with ``settings`` and ``urls``
    (snippets from the docs) appended to its settings.py and urls.py."""
    subprocess.run(
        [sys.executable, "-m", "django", "startproject", "mysite", str(directory)],
        check=True,
        capture_output=True,
    )
    for module, snippet in (("settings.py", settings), ("urls.py", urls)):
        path = directory / "mysite" / module
        path.write_text(path.read_text() + "\n" + as_addition(snippet))
    return directory


def run_in_project(directory: Path, script: str) -> str:
    """Run ``script`` in a new process of the project in ``directory``, after
    ``django.setup()``, with Django's test environment (so ``Client`` may be used); what it
    printed."""
    setup = (
        "import django\n"
        "django.setup()\n"
        "from django.test.utils import setup_test_environment\n"
        "setup_test_environment()\n"
    )
    environment = {key: value for key, value in os.environ.items() if not key.startswith("DJANGO_")}
    result = subprocess.run(
        [sys.executable, "-c", setup + textwrap.dedent(script)],
        cwd=directory,
        env={**environment, "DJANGO_SETTINGS_MODULE": "mysite.settings", "PYTHONPATH": "."},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout
