"""Django settings of the benchmark, and the servers it measures against.

One process holds every contender, so that rounds can alternate between them:

- ``default``: the PostgreSQL server of ``DATABASE_URL`` (or ``DLOCK_PG_URL``);
- ``proxied``: the same server through the delaying proxy (``benchmarks.proxy``);
- ``sqlite``: a SQLite file in WAL mode, transactions ``IMMEDIATE``;
- ``mariadb``: when ``DLOCK_MARIADB_URL`` is set (a hook for the MariaDB backend).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import django
from django.conf import settings

MARIADB_URL_ENV = "DLOCK_MARIADB_URL"


def postgres_url() -> str:
    url = os.environ.get("DATABASE_URL") or os.environ.get("DLOCK_PG_URL") or ""
    if not url.startswith("postgres"):
        raise SystemExit(
            "benchmarks: set DATABASE_URL (or DLOCK_PG_URL) to a PostgreSQL server, "
            "or run scripts/benchmark.sh, which starts one."
        )
    return url


def configure(
    proxy_port: int | None, other_apps: tuple[str, ...] = ("db_mutex",)
) -> dict[str, Any]:
    """Configure Django; return the parsed PostgreSQL settings. ``other_apps``:
    the apps of other contenders (django-db-mutex) beside django-dlock's."""
    import dj_database_url

    postgres = dj_database_url.parse(postgres_url())
    sqlite_dir = tempfile.mkdtemp(prefix="dlock-bench-")
    databases: dict[str, Any] = {
        "default": postgres,
        "sqlite": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": f"{sqlite_dir}/bench.sqlite3",
            "OPTIONS": {
                "transaction_mode": "IMMEDIATE",
                "timeout": 20,
                "init_command": "PRAGMA journal_mode=WAL",
            },
        },
    }
    if proxy_port is not None:
        databases["proxied"] = {**postgres, "HOST": "127.0.0.1", "PORT": proxy_port}
    if os.environ.get(MARIADB_URL_ENV):
        databases["mariadb"] = dj_database_url.parse(os.environ[MARIADB_URL_ENV])
    settings.configure(
        DEBUG=False,
        DATABASES=databases,
        INSTALLED_APPS=[
            "django.contrib.contenttypes",
            "django.contrib.auth",
            "django_dlock",
            *other_apps,
        ],
        USE_TZ=True,
        TIME_ZONE="UTC",
        LOGGING_CONFIG=None,
    )
    django.setup()
    return dict(postgres)


def migrate() -> None:
    from django.core.management import call_command
    from django.db import connections

    for alias in connections:
        if alias != "proxied":
            call_command("migrate", database=alias, verbosity=0)


class RedisServer:
    """A redis-server of the Debian package on loopback, without persistence,
    started and stopped (by its PID) by the benchmark."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[bytes] | None = None
        self.port = 0

    def __enter__(self) -> RedisServer:
        binary = shutil.which("redis-server")
        if binary is None:
            raise SystemExit("benchmarks: redis-server is missing (apt-get install redis-server)")
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        workdir = tempfile.mkdtemp(prefix="dlock-redis-")
        self.process = subprocess.Popen(  # noqa: S603 - a fixed binary and arguments
            [
                binary,
                "--bind",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                workdir,
                "--daemonize",
                "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
            time.sleep(0.05)
        self.__exit__()
        raise SystemExit("benchmarks: redis-server did not start within 10 s")

    def __exit__(self, *exc: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)

    @property
    def pid(self) -> int:
        assert self.process is not None  # noqa: S101
        return self.process.pid


def version_of(binary: str, *args: str) -> str:
    path = shutil.which(binary)
    if path is None:
        return "-"
    done = subprocess.run([path, *args], capture_output=True, text=True, check=False)  # noqa: S603
    return done.stdout.strip().splitlines()[0] if done.stdout else "-"


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "-"
