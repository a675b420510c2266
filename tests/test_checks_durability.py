"""The database check that warns when PostgreSQL may forget granted locks
(synchronous_commit or fsync off), against a throwaway cluster of its own."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connections

from django_dlock.checks_durability import check_durability

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def cluster() -> Iterator[dict[str, str]]:
    """A PostgreSQL cluster with fsync and synchronous_commit at their defaults
    (on), which ALTER SYSTEM may change (scripts/pg-cluster.sh)."""
    started = subprocess.run(
        [
            "bash",
            "-c",
            'source scripts/pg-cluster.sh && PG_CLUSTER_OPTIONS="-c log_min_messages=warning" pg_cluster_start '
            '&& echo "$DLOCK_PG_URL $PG_CLUSTER_DIR $PG_CLUSTER_BIN"',
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    url, directory, bin_dir = started.stdout.split()
    try:
        yield {"url": url, "directory": directory}
    finally:
        subprocess.run(
            ["bash", "-c", "source scripts/pg-cluster.sh && pg_cluster_stop"],
            cwd=ROOT,
            env={"PG_CLUSTER_DIR": directory, "PG_CLUSTER_BIN": bin_dir, "PATH": "/usr/bin:/bin"},
            timeout=120,
            check=False,
        )


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
def locks_on_cluster(settings: Any, cluster: dict[str, str]) -> Iterator[str]:
    """DLOCK_DATABASE = "locks", pointed at the throwaway cluster."""
    import dj_database_url

    settings.DLOCK_DATABASE = "locks"
    connection = connections["locks"]
    original = connection.settings_dict
    connection.close()
    connection.settings_dict = {**original, **dj_database_url.parse(cluster["url"])}
    try:
        yield cluster["url"]
    finally:
        connection.close()
        connection.settings_dict = original


def ids(databases: list[str]) -> list[str]:
    connections["locks"].close()  # a new session reads the reloaded settings
    return [str(message.id) for message in check_durability(databases=databases)]


@pytest.mark.requires_postgres
@pytest.mark.django_db(transaction=True, databases=["default", "locks"])
def test_durable_settings_pass(locks_on_cluster: str) -> None:
    assert ids(["default", "locks"]) == []


@pytest.mark.requires_postgres
@pytest.mark.django_db(transaction=True, databases=["default", "locks"])
def test_synchronous_commit_or_fsync_off_warns(locks_on_cluster: str) -> None:
    alter_system(locks_on_cluster, synchronous_commit="off", fsync="off")
    try:
        connections["locks"].close()
        messages = check_durability(databases=["locks"])
        assert [m.id for m in messages] == ["django_dlock.W010", "django_dlock.W011"]
        assert all("two owners" in m.msg and "issued twice" in m.msg for m in messages)

        alter_system(locks_on_cluster, fsync=None)
        assert ids(["locks"]) == ["django_dlock.W010"]

        # manage.py check runs it when asked for the database.
        out, err = StringIO(), StringIO()
        call_command("check", "--database", "locks", stdout=out, stderr=err)
        assert "django_dlock.W010" in out.getvalue() + err.getvalue()
    finally:
        alter_system(locks_on_cluster, synchronous_commit=None, fsync=None)
    assert ids(["locks"]) == []


@pytest.mark.requires_postgres
@pytest.mark.django_db(transaction=True, databases=["default", "locks"])
def test_runs_only_for_the_lock_database(locks_on_cluster: str) -> None:
    alter_system(locks_on_cluster, synchronous_commit="off")
    try:
        assert ids(["default"]) == []  # not asked about the lock database
        assert ids([]) == []
    finally:
        alter_system(locks_on_cluster, synchronous_commit=None)


@pytest.mark.django_db
def test_sqlite_is_not_checked(settings: Any, vendor: str) -> None:
    if vendor != "sqlite":
        pytest.skip("SQLite only")
    assert check_durability(databases=["default"]) == []
