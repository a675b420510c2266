"""What the runner does to the database server itself: create the run's
database, read the lock tables for a snapshot, terminate a process's session,
make the server read-only, stop and start it. ``Postgres`` and ``Mariadb``
(an admin connection each); SQLite has only its snapshot."""

from __future__ import annotations

import os
import shlex
import signal
import sqlite3
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

NOW_PG = "to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"+00:00\"')"
# One statement: the rows, the holds and the clock at one moment.
SNAPSHOT = (
    "SELECT 'row', resource, owner, fencing_token, expires_at, {now} FROM distributed_locks "
    "UNION ALL SELECT 'hold', resource, owner, fencing_token, expires_at, {now} "
    "FROM distributed_lock_holds UNION ALL SELECT 'now', '', '', 0, NULL, {now}"
)
Rows = list[dict[str, Any]]


class Server(Protocol):
    """A database server the runner can strike."""

    @property
    def can_restart(self) -> bool: ...

    @property
    def can_read_only(self) -> bool: ...

    def create_database(self, name: str) -> str: ...

    def terminate(self, session: str, timeout: float = 10) -> list[int]: ...

    def read_only(self, on: bool) -> None: ...

    def stop(self, mode: str) -> None: ...

    def start(self) -> None: ...

    def snapshot(self, url: str) -> tuple[str, Rows, Rows]: ...


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

    can_read_only = True

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

    def read_only(self, on: bool) -> None:
        self.alter_system("default_transaction_read_only", "on" if on else None)

    def backends(self, application_name: str) -> list[int]:
        rows = self.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s", [application_name]
        )
        return [pid for (pid,) in rows]

    def terminate(self, application_name: str, timeout: float = 10) -> list[int]:
        """Terminate the backends named ``application_name`` (a torture process's
        session: ``torture/<process>/<main|thread>``), waiting until one exists."""
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

    def snapshot(self, url: str) -> tuple[str, Rows, Rows]:
        import psycopg

        with psycopg.connect(url, autocommit=True, connect_timeout=5) as connection:
            rows = connection.execute(SNAPSHOT.format(now=NOW_PG)).fetchall()
        return split_snapshot(rows)


def split_snapshot(rows: list[tuple[Any, ...]]) -> tuple[str, Rows, Rows]:
    """The clock, the resources' rows and the holds, from ``SNAPSHOT``'s rows."""
    now = next(row[5] for row in rows if row[0] == "now")
    locks = [_row(row[1:5]) for row in rows if row[0] == "row"]
    holds = [_row(row[1:5]) for row in rows if row[0] == "hold"]
    return _text_time(now), locks, holds


def _row(row: tuple[Any, ...]) -> dict[str, Any]:
    resource, owner, token, expires_at = row
    return {
        "resource": resource,
        "owner": owner,
        "token": int(token),  # (a DECIMAL from MariaDB's UNION)
        "expires_at": _text_time(expires_at),
    }


def _text_time(value: Any) -> str:
    """A time as the history keeps it: ISO 8601 with an offset (naive: UTC)."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return str(value.isoformat())


def sqlite_snapshot(path: str) -> tuple[str, Rows, Rows]:
    db = sqlite3.connect(path, timeout=60, isolation_level=None)
    try:
        db.execute("BEGIN IMMEDIATE")  # the tables and the clock at one moment
        rows = db.execute(SNAPSHOT.format(now="STRFTIME('%Y-%m-%d %H:%M:%f000', 'NOW')")).fetchall()
        db.execute("COMMIT")
    finally:
        db.close()
    return split_snapshot(rows)


class Mariadb:
    """An admin connection to a MariaDB server and, for restarts, the server's
    directory (``MARIADB_DIR`` of ``scripts/mariadb-server.sh``: its pid file
    and socket). The admin is root through that socket when this process may
    be (it runs as root), else the user of ``admin_url``. The run's database
    gets a user of its own with rights on it alone, so that ``read_only``
    applies to the workers; where the admin cannot grant them (no GRANT
    OPTION), the workers use the admin's user, which ignores ``read_only``
    (``can_read_only`` is False). Sessions are found by the id each worker
    writes to ``sessions``/``<session>.id`` when it connects."""

    def __init__(self, admin_url: str, directory: str | None, sessions: Path) -> None:
        self.admin_url = admin_url
        self.directory = directory
        self.sessions = sessions
        self._command: list[bytes] = []
        self._server: subprocess.Popen[bytes] | None = None
        self.can_read_only = False

    @property
    def socket(self) -> Path | None:
        socket = Path(self.directory or "", "mysqld.sock")
        return socket if self.directory and os.getuid() == 0 and socket.exists() else None

    def execute(self, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
        from tools.torture.store import mysql_connect

        if self.socket is not None:
            connection = mysql_connect("mysql://root@localhost/", unix_socket=str(self.socket))
        else:
            connection = mysql_connect(self.admin_url)
        try:
            cursor = connection.cursor()
            cursor.execute(sql, params)
            return list(cursor.fetchall())
        finally:
            connection.close()

    def create_database(self, name: str) -> str:
        self.execute(f"DROP DATABASE IF EXISTS `{name}`")
        self.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
        try:
            self.execute("CREATE USER IF NOT EXISTS 'torture'@'127.0.0.1' IDENTIFIED BY 'torture'")
            self.execute(f"GRANT ALL PRIVILEGES ON `{name}`.* TO 'torture'@'127.0.0.1'")
        except _mysqldb().OperationalError:  # no GRANT OPTION: the admin's user, then
            return with_database(self.admin_url, name)
        self.can_read_only = True
        parts = urlsplit(self.admin_url)
        netloc = f"torture:torture@{parts.hostname}:{parts.port}"
        return urlunsplit(parts._replace(netloc=netloc, path=f"/{name}"))

    def read_only(self, on: bool) -> None:
        self.execute(f"SET GLOBAL read_only = {'ON' if on else 'OFF'}")

    def terminate(self, session: str, timeout: float = 10) -> list[int]:
        """KILL the connection of ``session`` (``torture/<process>/<main|thread>``),
        waiting until the process has said which it is."""
        path = self.sessions / (session.replace("/", "+") + ".id")
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                connection_id = int(path.read_text())
                self.execute(f"KILL CONNECTION {connection_id}")
                return [connection_id]
            except (OSError, ValueError, _mysqldb().OperationalError):
                time.sleep(0.05)  # not connected yet, or connected again since
        return []

    @property
    def pid_file(self) -> Path:
        return Path(self.directory or "", "mysqld.pid")

    @property
    def can_restart(self) -> bool:
        return bool(self.directory) and self.pid_file.exists()

    def stop(self, mode: str) -> None:
        """SIGTERM (``fast``: a clean shutdown) or SIGKILL (``immediate``: a
        crash, then InnoDB's recovery) to the server, waiting for its end."""
        pid = int(self.pid_file.read_text())
        self._command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]
        os.kill(pid, signal.SIGTERM if mode == "fast" else signal.SIGKILL)
        if self._server is not None and self._server.pid == pid:
            self._server.wait(60)
        end = time.monotonic() + 60
        while _running(pid) and time.monotonic() < end:
            time.sleep(0.05)

    def start(self) -> None:
        """The server again, with the command line it had (its own session: it
        outlives the runner, and ``mariadb-server.sh`` stops it by its pid file)."""
        self.pid_file.unlink(missing_ok=True)
        self._server = subprocess.Popen(  # the server's own command line
            self._command,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        end = time.monotonic() + 60
        while time.monotonic() < end:
            try:
                self.execute("SELECT 1")
                return
            except Exception:  # starting: InnoDB recovers first
                time.sleep(0.1)
        raise RuntimeError("MariaDB did not start again")

    def snapshot(self, url: str) -> tuple[str, Rows, Rows]:
        from tools.torture.store import mysql_connect

        connection = mysql_connect(url)
        try:
            cursor = connection.cursor()
            cursor.execute(SNAPSHOT.format(now="UTC_TIMESTAMP(6)"))
            rows = list(cursor.fetchall())
        finally:
            connection.close()
        return split_snapshot(rows)


def _mysqldb() -> Any:
    import MySQLdb  # type: ignore[import-untyped]

    return MySQLdb


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie that its parent has not reaped does not)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status
