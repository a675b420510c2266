"""What the runner does to the database itself: create it, read the lock table
for a snapshot, and (PostgreSQL) terminate backends, change settings, restart."""

from __future__ import annotations

import shlex
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

NOW_PG = "SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"+00:00\"')"
SNAPSHOT_PG = (
    "SELECT resource, owner, fencing_token, expires_at, "
    "to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"+00:00\"') "
    "FROM distributed_locks"
)


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


class Postgres:
    """An admin connection to the server (as superuser) and, when the runner
    started the cluster, its data directory for restarts."""

    def __init__(self, admin_url: str, cluster_dir: str | None, bin_dir: str | None) -> None:
        self.admin_url = admin_url
        self.cluster_dir = cluster_dir
        self.bin_dir = bin_dir

    def execute(self, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True, connect_timeout=5) as connection:
            cursor = connection.execute(sql, params)
            return list(cursor.fetchall()) if cursor.description else []

    def create_database(self, name: str) -> str:
        self.execute(f'DROP DATABASE IF EXISTS "{name}"')
        self.execute(f'CREATE DATABASE "{name}"')
        return with_database(self.admin_url, name)

    def setting(self, name: str) -> str:
        return str(self.execute(f"SHOW {name}")[0][0])

    def alter_system(self, name: str, value: str | None) -> None:
        if value is None:
            self.execute(f"ALTER SYSTEM RESET {name}")
        else:
            self.execute(f"ALTER SYSTEM SET {name} = '{value}'")
        self.execute("SELECT pg_reload_conf()")

    def backends(self, application_name: str) -> list[int]:
        rows = self.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s", [application_name]
        )
        return [pid for (pid,) in rows]

    def terminate(self, application_name: str, timeout: float = 10) -> list[int]:
        """Terminate the backends named ``application_name`` (waiting until one exists)."""
        end = time.monotonic() + timeout
        while not (pids := self.backends(application_name)):
            if time.monotonic() > end:
                return []
            time.sleep(0.05)
        for pid in pids:
            self.execute("SELECT pg_terminate_backend(%s)", [pid])
        return pids

    @property
    def can_restart(self) -> bool:
        return bool(self.cluster_dir and self.bin_dir)

    def stop(self, mode: str) -> None:
        data = f"{self.cluster_dir}/data"
        self._options = self._postmaster_options(data)
        self._as_owner(f"'{self.bin_dir}/pg_ctl' -D '{data}' -m {mode} -w -t 60 stop")

    def start(self) -> None:
        data = f"{self.cluster_dir}/data"
        log = f"{self.cluster_dir}/server.log"
        options = shlex.quote(self._options)
        self._as_owner(
            f"'{self.bin_dir}/pg_ctl' -D '{data}' -l '{log}' -w -t 60 -o {options} start"
        )

    def _postmaster_options(self, data: str) -> str:
        """The server's command-line options (postmaster.opts), without -D."""
        words = shlex.split(Path(data, "postmaster.opts").read_text())[1:]
        kept: list[str] = []
        skip = False
        for word in words:
            if skip:
                skip = False
            elif word == "-D":
                skip = True
            else:
                kept.append(word)
        return shlex.join(kept)

    def _as_owner(self, command: str) -> None:
        import os

        if os.getuid() == 0:
            subprocess.run(["su", "postgres", "-s", "/bin/sh", "-c", command], check=True)
        else:
            subprocess.run(["sh", "-c", command], check=True)

    def snapshot(self, url: str) -> tuple[str, list[dict[str, Any]]]:
        import psycopg

        with psycopg.connect(url, autocommit=True, connect_timeout=5) as connection:
            # One statement: the rows and the clock at one moment.
            rows = connection.execute(SNAPSHOT_PG).fetchall()
            if not rows:
                (now,) = connection.execute(NOW_PG).fetchone() or (None,)
                return now, []
        return rows[0][4], [_row(r[:4]) for r in rows]


def _row(row: tuple[Any, ...]) -> dict[str, Any]:
    resource, owner, token, expires_at = row
    if not isinstance(expires_at, str):
        expires_at = expires_at.isoformat()
    return {"resource": resource, "owner": owner, "token": token, "expires_at": expires_at}


def sqlite_snapshot(path: str) -> tuple[str, list[dict[str, Any]]]:
    db = sqlite3.connect(path, timeout=60, isolation_level=None)
    try:
        db.execute("BEGIN IMMEDIATE")  # the table and the clock at one moment
        rows = db.execute(
            "SELECT resource, owner, fencing_token, expires_at FROM distributed_locks"
        ).fetchall()
        (now,) = db.execute("SELECT STRFTIME('%Y-%m-%d %H:%M:%f000', 'NOW')").fetchone()
        db.execute("COMMIT")
    finally:
        db.close()
    return _sqlite_time(now), [{**_row(r), "expires_at": _sqlite_time(r[3])} for r in rows]


def _sqlite_time(value: str) -> str:
    # Django stores aware datetimes as UTC text without an offset on SQLite.
    return value.replace(" ", "T") + "+00:00" if "+" not in value else value.replace(" ", "T")
