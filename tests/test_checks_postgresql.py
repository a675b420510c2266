"""The checks of a PostgreSQL lock database (django_dlock/backends/postgresql/checks.py):
durable commits (synchronous_commit, fsync) and no replica (pg_is_in_recovery()),
against a throwaway primary and a streaming standby of their own."""

from __future__ import annotations

import shlex
import socket
import subprocess
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.core.management import call_command
from django.db import connections

from django_dlock.checks import check_database

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.requires_postgres


def pg_cluster(script: str, env: dict[str, str] | None = None) -> str:
    """Run ``script`` with scripts/pg-cluster.sh's functions; its output."""
    done = subprocess.run(
        ["bash", "-c", f"set -e; source scripts/pg-cluster.sh; {script}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout


@pytest.fixture(scope="module")
def cluster() -> Iterator[dict[str, str]]:
    """A PostgreSQL cluster with fsync and synchronous_commit at their defaults
    (on), which ALTER SYSTEM may change (scripts/pg-cluster.sh)."""
    url, directory, bin_dir = pg_cluster(
        'PG_CLUSTER_OPTIONS="-c log_min_messages=warning" pg_cluster_start; '
        'echo "$DLOCK_PG_URL $PG_CLUSTER_DIR $PG_CLUSTER_BIN"'
    ).split()
    try:
        yield {"url": url, "directory": directory, "bin": bin_dir}
    finally:
        pg_cluster(
            "pg_cluster_stop",
            env={"PG_CLUSTER_DIR": directory, "PG_CLUSTER_BIN": bin_dir, "PATH": "/usr/bin:/bin"},
        )


@pytest.fixture(scope="module")
def standby(cluster: dict[str, str]) -> Iterator[str]:
    """The URL of a streaming standby of ``cluster`` (pg_basebackup -R): in recovery."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    primary = urlsplit(cluster["url"])
    directory = cluster["directory"]
    # Where pg_ctl really is: PG_CLUSTER_BIN may be a directory of links to a few of them.
    binaries = str(Path(cluster["bin"], "pg_ctl").resolve().parent)
    data = f"{directory}/standby"
    # max_connections as on the primary (scripts/pg-cluster.sh): a standby may not have fewer.
    options = f"-c listen_addresses=127.0.0.1 -p {port} -k {directory} -c max_connections=200"

    def as_owner(*commands: str) -> None:
        # pg_cluster_as_owner runs a shell command line, as postgres when root.
        pg_cluster(
            "; ".join(f"pg_cluster_as_owner {shlex.quote(command)}" for command in commands),
            env={"PG_CLUSTER_BIN": binaries, "PATH": "/usr/bin:/bin"},
        )

    as_owner(
        f"{binaries}/pg_basebackup -h 127.0.0.1 -p {primary.port} -U postgres -D {data} -R",
        f"{binaries}/pg_ctl -D {data} -l {data}.log -w -t 60 -o '{options}' start",
    )
    try:
        yield primary._replace(netloc=f"postgres@127.0.0.1:{port}").geturl()
    finally:
        as_owner(f"{binaries}/pg_ctl -D {data} -m immediate -w stop")


def alter_system(url: str, **values: str | None) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as connection:
        for name, value in values.items():
            if value is None:
                connection.execute(f"ALTER SYSTEM RESET {name}")
            else:
                connection.execute(f"ALTER SYSTEM SET {name} = '{value}'")
        connection.execute("SELECT pg_reload_conf()")


@pytest.fixture
def lock_database(settings: Any) -> Iterator[Any]:
    """DLOCK_DATABASE = "locks"; call it with a URL to point that alias there."""
    import dj_database_url

    settings.DLOCK_DATABASE = "locks"
    connection = connections["locks"]
    original = connection.settings_dict

    def point_at(url: str) -> str:
        connection.close()
        connection.settings_dict = {**original, **dj_database_url.parse(url)}
        return url

    try:
        yield point_at
    finally:
        connection.close()
        connection.settings_dict = original


def ids(databases: list[str]) -> list[str]:
    connections["locks"].close()  # a new session reads the reloaded settings
    return [str(message.id) for message in check_database(databases=databases)]


@pytest.mark.django_db(transaction=True, databases=["default", "locks"])
def test_a_durable_primary_passes(lock_database: Any, cluster: dict[str, str]) -> None:
    lock_database(cluster["url"])
    assert ids(["default", "locks"]) == []


@pytest.mark.django_db(transaction=True, databases=["default", "locks"])
def test_synchronous_commit_or_fsync_off_warns(lock_database: Any, cluster: dict[str, str]) -> None:
    url = lock_database(cluster["url"])
    alter_system(url, synchronous_commit="off", fsync="off")
    try:
        connections["locks"].close()
        messages = check_database(databases=["locks"])
        assert [m.id for m in messages] == ["django_dlock.W010", "django_dlock.W011"]
        assert all("two owners" in m.msg and "issued twice" in m.msg for m in messages)

        alter_system(url, fsync=None)
        assert ids(["locks"]) == ["django_dlock.W010"]

        # manage.py check runs it when asked for the database.
        out, err = StringIO(), StringIO()
        call_command("check", "--database", "locks", stdout=out, stderr=err)
        assert "django_dlock.W010" in out.getvalue() + err.getvalue()
    finally:
        alter_system(url, synchronous_commit=None, fsync=None)
    assert ids(["locks"]) == []


@pytest.mark.django_db(transaction=True, databases=["default", "locks"])
def test_the_server_is_asked_only_for_the_lock_database(
    lock_database: Any, cluster: dict[str, str]
) -> None:
    url = lock_database(cluster["url"])
    alter_system(url, synchronous_commit="off")
    try:
        assert ids(["default"]) == []  # not asked about the lock database
        assert ids([]) == []
    finally:
        alter_system(url, synchronous_commit=None)


@pytest.mark.django_db(transaction=True, databases=["default", "locks"])
def test_a_standby_is_an_error(lock_database: Any, standby: str) -> None:
    lock_database(standby)
    messages = check_database(databases=["locks"])
    assert [m.id for m in messages] == ["django_dlock.E402"]
    assert "'locks'" in messages[0].msg and "pg_is_in_recovery()" in messages[0].msg
    assert check_database() == []  # the settings do not tell
