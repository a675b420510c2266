"""The testing kit (``django_dlock.testing``): its pytest plugin and mixin, run in a pytest of
their own on a test database of their own, on the database under test. Each helper passes when
it should and fails when it should (tests/kit_cases/: the expected outcome is in each name)."""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
import tomllib
from collections import defaultdict
from pathlib import Path

import pytest

from tests.docs_utils import example

ROOT = Path(__file__).resolve().parent.parent
CASES = Path(__file__).resolve().parent / "kit_cases"

# The inner run's settings: the suite's, on a test database that is not this run's.
SETTINGS = """
import os
from tests.settings import *  # noqa: F403

for _alias, _database in DATABASES.items():  # noqa: F405
    if _database["ENGINE"] != "django.db.backends.sqlite3":
        _test = {**_database.get("TEST", {}), "NAME": f"test_dlock_kit_{os.getpid()}"}
        DATABASES[_alias] = {**_database, "TEST": _test}  # noqa: F405
"""


def plugin_arguments() -> list[str]:
    """Load the plugin by its module where the installed metadata has no entry point yet
    (an editable install made before it was added); loading it twice would be refused."""
    names = {entry.name for entry in importlib.metadata.entry_points(group="pytest11")}
    return [] if "django_dlock" in names else ["-p", "django_dlock.testing.pytest_plugin"]


def run_pytest(
    directory: Path, files: dict[str, str], *arguments: str, ini: str = "", django: bool = True
) -> tuple[dict[str, set[str]], str]:
    """Run pytest in ``directory`` on ``files``; each test's outcomes (``-rA``: a test
    that errs at teardown is PASSED and ERROR) by its name, and the output."""
    for name, text in files.items():
        (directory / name).write_text(text)
    (directory / "kit_settings.py").write_text(SETTINGS)
    (directory / "pytest.ini").write_text(f"[pytest]\n{ini}\n")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(directory), str(ROOT)]),
        "DLOCK_TEST_SQLITE_FILE": str(directory / "kit.sqlite3"),
    }
    env.pop("PYTEST_ADDOPTS", None)
    if django:
        env["DJANGO_SETTINGS_MODULE"] = "kit_settings"
    else:
        env.pop("DJANGO_SETTINGS_MODULE", None)
    command = [sys.executable, "-m", "pytest", "-rA", "-p", "no:randomly", "-p", "no:cacheprovider"]
    done = subprocess.run(
        [*command, *plugin_arguments(), *arguments],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    outcomes: dict[str, set[str]] = defaultdict(set)
    for outcome, test in re.findall(r"^(PASSED|FAILED|ERROR) \S+::(\S+)", done.stdout, re.M):
        outcomes[test.split("::")[-1]].add(outcome)
    return outcomes, done.stdout + done.stderr


def expected(name: str) -> set[str]:
    """What a case's name says: ``test_pass_*`` passes, ``test_fail_*`` fails (in the
    test, or in a unittest tearDown), ``test_error_*`` errs at its teardown."""
    if name.startswith("test_pass_"):
        return {"PASSED"}
    if name.startswith("test_fail_"):
        return {"FAILED"}
    return {"PASSED", "ERROR"}


def case_names(text: str) -> list[str]:
    return re.findall(r"^\s*def (test_\w+)", text, re.M)


@pytest.fixture(scope="module")
def kit_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, set[str]], str]:
    """One inner run of the cases and the docs' examples (each inner run creates a test
    database: on PostgreSQL and MariaDB that is most of its time)."""
    files = {
        "test_kit_cases.py": (CASES / "cases_kit.py").read_text(),
        "test_doc_pytest.py": example("testing pytest")[1],
        "test_doc_leaks.py": example("testing leaks")[1],
        "test_doc_unittest.py": example("testing unittest")[1],
    }
    return run_pytest(tmp_path_factory.mktemp("kit"), files)


def test_each_helper_passes_and_fails_when_it_should(
    kit_run: tuple[dict[str, set[str]], str],
) -> None:
    outcomes, output = kit_run
    names = case_names((CASES / "cases_kit.py").read_text())
    assert len(names) >= 30
    assert {name: outcomes.get(name) for name in names} == {
        name: expected(name) for name in names
    }, output
    # The failures say why, naming the lock and never an owner.
    assert "The testing kit could not hold 'job:2'" in output
    assert "did not run under the lock 'job:5'; it took: ['job:other']" in output
    assert "acquired 'job:6' and left it held" in output
    assert "The test left 1 lock(s) held: 'leak:1' (exclusive, token" in output
    assert "Error when trying to teardown test databases" not in output, output
    [refusal] = re.findall(r"^E +AssertionError: The testing kit could not hold .*$", output, re.M)
    assert "exclusive hold, token" in refusal and "owner-secret" not in refusal


def test_the_docs_examples_run_as_a_reader_would(
    kit_run: tuple[dict[str, set[str]], str],
) -> None:
    outcomes, output = kit_run
    assert {name: outcomes.get(name) for name in DOCS_CASES} == DOCS_CASES, output
    assert "'import:orders' (exclusive, token" in output


DOCS_CASES = {
    "test_the_report_runs_under_its_lock": {"PASSED"},
    "test_the_report_skips_while_another_process_writes_it": {"PASSED"},
    "test_a_crashed_writers_lock_runs_out": {"PASSED"},
    "test_the_throttle_frees_a_minute_later": {"PASSED"},
    "test_forgets_to_release": {"PASSED", "ERROR"},
    "test_skips_while_held_elsewhere": {"PASSED"},
    "test_runs_under_the_lock": {"PASSED"},
}


def test_the_ini_option_checks_every_test_that_uses_the_database(tmp_path: Path) -> None:
    cases = (CASES / "cases_ini.py").read_text()
    outcomes, output = run_pytest(
        tmp_path, {"test_ini.py": cases}, ini="dlock_fail_on_leaked_locks = true"
    )
    names = case_names(cases)
    assert {name: outcomes.get(name) for name in names} == {
        name: expected(name) for name in names
    }, output


@pytest.mark.vendor_independent
def test_the_plugin_loads_without_pytest_django(tmp_path: Path) -> None:
    # Installed, pytest loads it by its entry point, before any Django settings exist.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["pytest11"] == {
        "django_dlock": "django_dlock.testing.pytest_plugin"
    }
    files = {"test_plain.py": "def test_pass_plain():\n    assert True\n"}
    outcomes, output = run_pytest(tmp_path, files, "-p", "no:django", "--fixtures", django=False)
    assert "dlock -- " in output or "dlock\n" in output, output
    outcomes, output = run_pytest(tmp_path, files, "-p", "no:django", django=False)
    assert outcomes == {"test_pass_plain": {"PASSED"}}, output
