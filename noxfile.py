"""The version matrix (`nox -l` lists the sessions; `pip install --group matrix` brings nox).

- ``tests-<python>-django<version>-<db>``: the suite for each supported pair of Python and Django,
  on SQLite, PostgreSQL or MariaDB. PostgreSQL is DLOCK_PG_URL (or DATABASE_URL when it names
  PostgreSQL) when set, else a throwaway cluster from scripts/pg-cluster.sh for the session;
  MariaDB likewise DLOCK_MYSQL_URL (or a mysql:// DATABASE_URL), else a throwaway server from
  scripts/mariadb-server.sh. The browser, fuzz and Celery tests are left out: they do not depend
  on these versions and cost minutes. Arguments after ``--`` go to pytest instead of that
  selection. Tags: ``oldest`` and ``newest`` (the matrix's corners), ``sqlite``, ``postgres``
  and ``mariadb``.
- ``django-main``: the suite on SQLite against Django's next version. Django's main branch is
  not on PyPI, and only package registries are reachable here, so it is the newest Django on
  PyPI, pre-releases included (``pip install --pre``): a 6.2 alpha, beta or release candidate
  once one is published. While PyPI has nothing newer than the ``newest`` corner's Django
  series, the session is skipped (it would run that corner again). It is allowed to fail: a
  failed suite makes the session skipped, with the reason, never failed, so it can run in CI
  without failing it.
- ``portable-postgres``: the suite on PostgreSQL with ``server_side_binding``, where the
  backend's one-statement operations do not apply: its portable ones run (as with psycopg2).
  scripts/test.sh runs the same in .venv (its ``portable`` step).
- ``base-<python>``: Django alone, without DRF or Celery, runs the core.
- ``lint``: ruff and mypy.

A session whose Python is not on this machine is skipped.
"""

from __future__ import annotations

import os
import pwd
import shlex
import subprocess
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
MARIADB_EXTRAS = ".[api,celery,postgres,mysql]"
DATABASES = ("sqlite", "postgres", "mariadb")
# django-main's Python: the newest this project supports, which Django's next version keeps.
MAIN_PYTHON = "3.13"
VERSION_INDEPENDENT_TESTS = (
    "tests/test_admin_browser.py",
    "tests/test_admin_edit_lock_browser.py",
    "tests/test_api_fuzz.py",
    "tests/test_contrib_celery.py",
)


def _add_pyenv_interpreters() -> None:
    """Put pyenv's interpreters on PATH: its shims run only the versions it has selected, so
    ``python3.12`` would fail on a machine where pyenv selects 3.11. pyenv is looked for in
    PYENV_ROOT, else in the user's home as the password database has it, which a clean
    environment (``env -i HOME=$(mktemp -d)``, as CI's check runs) does not change."""
    home = Path(pwd.getpwuid(os.getuid()).pw_dir)
    root = Path(os.environ.get("PYENV_ROOT") or home / ".pyenv")
    pythons = sorted({python for pythons in DJANGO_PYTHONS.values() for python in pythons})
    found = [sorted(root.glob(f"versions/{python}.*/bin"))[-1:] for python in pythons]
    directories = [str(directory) for directories in found for directory in directories]
    if directories:
        os.environ["PATH"] = os.pathsep.join([*directories, os.environ.get("PATH", "")])


_add_pyenv_interpreters()


def _matrix() -> Iterator[nox.param]:
    for django, pythons in DJANGO_PYTHONS.items():
        for python in pythons:
            for database in DATABASES:
                tags = [database]
                if (python, django) == OLDEST:
                    tags.append("oldest")
                if (python, django) == NEWEST:
                    tags.append("newest")
                yield nox.param(
                    python, django, database, id=f"{python}-django{django}-{database}", tags=tags
                )


def _url_given(variable: str, schemes: tuple[str, ...]) -> str | None:
    """``variable``, else DATABASE_URL, when it is a URL of one of ``schemes``."""
    url = os.environ.get(variable) or os.environ.get("DATABASE_URL", "")
    return url if url.startswith(schemes) else None


@contextmanager
def _postgres(session: nox.Session) -> Iterator[str]:
    """The URL of a PostgreSQL server: the one given, or a throwaway cluster for this session."""
    given = _url_given("DLOCK_PG_URL", ("postgres://", "postgresql://"))
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


@contextmanager
def _mariadb(session: nox.Session) -> Iterator[str]:
    """The URL of a MariaDB server: the one given, or a throwaway server for this session.

    The server runs as a child of a shell that waits for its input to close and then stops
    it: a shell that exited at once (as ``_postgres``'s does, whose pg_ctl detaches the
    server) would leave the server to whatever adopts orphans, which here never reaps them,
    and ``mariadb_stop`` would wait 30 s for a process that has already exited.
    """
    given = _url_given("DLOCK_MYSQL_URL", ("mysql://",))
    if given:
        yield given
        return
    session.log("starting a throwaway MariaDB server (scripts/mariadb-server.sh)")
    server = subprocess.Popen(
        [  # noqa: S607 - bash from PATH, as session.run finds it
            "bash",
            "-c",
            "set -e; source scripts/mariadb-server.sh; mariadb_start;"
            ' echo "$DLOCK_MYSQL_URL"; read -r _ || true; mariadb_stop',
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdin is not None and server.stdout is not None  # noqa: S101 - both piped
    url = server.stdout.readline().strip()
    try:
        if not url.startswith("mysql://"):
            session.error("scripts/mariadb-server.sh could not start MariaDB (its output is above)")
        yield url
    finally:
        server.stdin.close()
        server.wait(timeout=120)


@nox.session
@nox.parametrize(("python", "django", "database"), list(_matrix()))
def tests(session: nox.Session, django: str, database: str) -> None:
    pytest_args = session.posargs or [f"--ignore={path}" for path in VERSION_INDEPENDENT_TESTS]
    test_group = nox.project.dependency_groups(PYPROJECT, "test")
    if database == "sqlite":
        session.install("-e", EXTRAS, f"django~={django}.0", *test_group)
        session.run("python", "-m", "pytest", *pytest_args, env={"DATABASE_URL": None})
        return
    # The tests marked vendor_independent (no database, or a SQLite file of their own) run in
    # the pair's SQLite session only, as scripts/test.sh's database steps leave them out.
    elsewhere = {"DLOCK_SKIP_VENDOR_INDEPENDENT": "1"}
    if database == "postgres":
        session.install("-e", EXTRAS, f"django~={django}.0", *test_group)
        with _postgres(session) as url:
            session.run(
                "python", "-m", "pytest", *pytest_args, env={"DATABASE_URL": url, **elsewhere}
            )
        return
    # Started first: it installs what building mysqlclient needs (scripts/mariadb-server.sh).
    with _mariadb(session) as url:
        session.install("-e", MARIADB_EXTRAS, f"django~={django}.0", *test_group)
        session.run("python", "-m", "pytest", *pytest_args, env={"DATABASE_URL": url, **elsewhere})


@nox.session(name="django-main", python=MAIN_PYTHON)
def django_main(session: nox.Session) -> None:
    """The suite on SQLite against Django's next version; allowed to fail (see above)."""
    session.install("--pre", "--upgrade", "django")
    version, series = str(
        session.run(
            "python",
            "-c",
            "import django; print(django.get_version(), '%d.%d' % django.VERSION[:2])",
            silent=True,
        )
    ).split()[-2:]
    if series == NEWEST[1]:
        session.skip(f"Django {version} is of the newest corner's series: nothing newer on PyPI")
    session.install("-e", EXTRAS, *nox.project.dependency_groups(PYPROJECT, "test"))
    session.install("--pre", "--upgrade", "django")
    session.log(f"Django {version}")
    pytest_args = session.posargs or [f"--ignore={path}" for path in VERSION_INDEPENDENT_TESTS]
    try:
        session.run("python", "-m", "pytest", *pytest_args, env={"DATABASE_URL": None})
    except nox.command.CommandFailed as failure:
        session.skip(f"allowed to fail: the suite failed on Django {version} ({failure.reason})")


@nox.session(name="portable-postgres", python=OLDEST[0], tags=["postgres"])
def portable_postgres(session: nox.Session) -> None:
    """PostgreSQL's portable operations: the suite with server-side binding."""
    session.install(
        "-e", EXTRAS, f"django~={OLDEST[1]}.0", *nox.project.dependency_groups(PYPROJECT, "test")
    )
    pytest_args = session.posargs or [f"--ignore={path}" for path in VERSION_INDEPENDENT_TESTS]
    with _postgres(session) as url:
        session.run(
            "python",
            "-m",
            "pytest",
            *pytest_args,
            env={"DATABASE_URL": url, "DLOCK_PG_SERVER_SIDE_BINDING": "1"},
        )


@nox.session(python=["3.11", "3.13"])
def base(session: nox.Session) -> None:
    """Django alone: the core, its admin, lock() and purge_locks, with no DRF or Celery."""
    session.install("-e", ".", *nox.project.dependency_groups(PYPROJECT, "test-base"))
    session.run(
        "python",
        "-m",
        "pytest",
        "--ds=tests.settings_base",
        *(session.posargs or ["tests/test_base_install.py", "tests/test_api_extra_missing.py"]),
        env={"DATABASE_URL": None},
    )


@nox.session(python="3.11")
def lint(session: nox.Session) -> None:
    session.install("-e", EXTRAS, *nox.project.dependency_groups(PYPROJECT, "lint", "typing"))
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy")
