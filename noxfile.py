"""The version matrix (`nox -l` lists the sessions; `pip install --group matrix` brings nox).

- ``tests-<python>-django<version>-<db>``: the suite for each supported pair of Python and Django,
  on SQLite or PostgreSQL. PostgreSQL is DLOCK_PG_URL (or DATABASE_URL when it names PostgreSQL)
  when set, else a throwaway cluster from scripts/pg-cluster.sh for the session. The browser,
  fuzz and Celery tests are left out: they do not depend on these versions and cost minutes.
  Arguments after ``--`` go to pytest instead of that selection. Tags: ``oldest`` and ``newest``
  (the matrix's corners), ``sqlite`` and ``postgres``.
- ``base-<python>``: Django alone, without DRF or Celery, runs the core.
- ``lint``: ruff and mypy.

A session whose Python is not on this machine is skipped.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import nox

nox.options.error_on_missing_interpreters = False
nox.options.reuse_venv = "yes"

PYPROJECT = nox.project.load_toml("pyproject.toml")
# Each Django release with the Pythons it supports, among those this project supports.
DJANGO_PYTHONS = {
    "5.2": ("3.11", "3.12", "3.13"),
    "6.0": ("3.12", "3.13"),
    "6.1": ("3.12", "3.13"),
}
OLDEST = ("3.11", "5.2")
NEWEST = ("3.13", "6.1")
EXTRAS = ".[api,celery,postgres]"
VERSION_INDEPENDENT_TESTS = (
    "tests/test_admin_browser.py",
    "tests/test_api_fuzz.py",
    "tests/test_contrib_celery.py",
)


def _add_pyenv_interpreters() -> None:
    """Put pyenv's interpreters on PATH: its shims run only the versions it has selected, so
    ``python3.12`` would fail on a machine where pyenv selects 3.11."""
    root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    pythons = sorted({python for pythons in DJANGO_PYTHONS.values() for python in pythons})
    found = [sorted(root.glob(f"versions/{python}.*/bin"))[-1:] for python in pythons]
    directories = [str(directory) for directories in found for directory in directories]
    if directories:
        os.environ["PATH"] = os.pathsep.join([*directories, os.environ.get("PATH", "")])


_add_pyenv_interpreters()


def _matrix() -> Iterator[nox.param]:
    for django, pythons in DJANGO_PYTHONS.items():
        for python in pythons:
            for database in ("sqlite", "postgres"):
                tags = [database]
                if (python, django) == OLDEST:
                    tags.append("oldest")
                if (python, django) == NEWEST:
                    tags.append("newest")
                yield nox.param(
                    python, django, database, id=f"{python}-django{django}-{database}", tags=tags
                )


def _postgres_url_given() -> str | None:
    url = os.environ.get("DLOCK_PG_URL") or os.environ.get("DATABASE_URL", "")
    return url if url.startswith(("postgres://", "postgresql://")) else None


@contextmanager
def _postgres(session: nox.Session) -> Iterator[str]:
    """The URL of a PostgreSQL server: the one given, or a throwaway cluster for this session."""
    given = _postgres_url_given()
    if given:
        yield given
        return
    started = session.run(
        "bash",
        "-c",
        "set -e; source scripts/pg-cluster.sh; pg_cluster_start;"
        ' echo "$DLOCK_PG_URL $PG_CLUSTER_DIR $PG_CLUSTER_BIN"',
        external=True,
        silent=True,
    )
    url, directory, binaries = str(started).split()[-3:]
    try:
        yield url
    finally:
        session.run(
            "bash",
            "-c",
            f"PG_CLUSTER_DIR={shlex.quote(directory)} PG_CLUSTER_BIN={shlex.quote(binaries)};"
            " source scripts/pg-cluster.sh; pg_cluster_stop",
            external=True,
        )


@nox.session
@nox.parametrize(("python", "django", "database"), list(_matrix()))
def tests(session: nox.Session, django: str, database: str) -> None:
    session.install(
        "-e",
        EXTRAS,
        f"django~={django}.0",
        *nox.project.dependency_groups(PYPROJECT, "test"),
    )
    pytest_args = session.posargs or [f"--ignore={path}" for path in VERSION_INDEPENDENT_TESTS]
    if database == "sqlite":
        session.run("python", "-m", "pytest", *pytest_args, env={"DATABASE_URL": None})
        return
    with _postgres(session) as url:
        session.run("python", "-m", "pytest", *pytest_args, env={"DATABASE_URL": url})


@nox.session(python=["3.11", "3.13"])
def base(session: nox.Session) -> None:
    """Django alone: the core, its admin, lock() and purge_locks, with no DRF or Celery."""
    session.install("-e", ".", *nox.project.dependency_groups(PYPROJECT, "test-base"))
    session.run(
        "python",
        "-m",
        "pytest",
        "--ds=tests.settings_base",
        *(session.posargs or ["tests/test_base_install.py"]),
        env={"DATABASE_URL": None},
    )


@nox.session(python="3.11")
def lint(session: nox.Session) -> None:
    session.install("-e", EXTRAS, *nox.project.dependency_groups(PYPROJECT, "lint", "typing"))
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy")
