"""Helpers for tests that run real OS processes against the test database."""

from __future__ import annotations

import multiprocessing
import os
import queue
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from multiprocessing.context import SpawnContext
from pathlib import Path
from typing import Any

from django.db import connection
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import DurationField, Value

WORKER_TIMEOUT = 120  # seconds; a hung worker fails the test instead of hanging it

# Spawned (not forked) processes share nothing with the test process: each opens
# its own database connection, as separate hosts would.
spawn: SpawnContext = multiprocessing.get_context("spawn")


def make_lock(resource: str, owner: str = "worker-1", *, expires_in: float = 60) -> Any:
    """A lock acquired by ``owner`` whose expiry is ``expires_in`` seconds from the
    database's now (negative: expired that long ago)."""
    from django_dlock.models import DistributedLock
    from django_dlock.rules.clock import DatabaseNow

    lock = DistributedLock.objects.acquire(resource, owner=owner, ttl=60)
    assert lock is not None
    DistributedLock.objects.filter(pk=lock.pk).update(
        expires_at=DatabaseNow()
        + Value(timedelta(seconds=expires_in), output_field=DurationField())
    )
    lock.refresh_from_db()
    return lock


def make_delayed_lock(
    resource: str, owner: str = "worker-1", *, lock_delay: float = 30, force: bool = False
) -> Any:
    """A lock on ``resource`` lost by its holder while its ``lock_delay`` runs,
    made the real way: acquired with a lock-delay, then left to expire (by the
    database's clock), or with ``force``, force-released by an operator."""
    from django_dlock.models import DistributedLock

    ttl = 60 if force else 0.2
    lock = DistributedLock.objects.acquire(resource, owner=owner, ttl=ttl, lock_delay=lock_delay)
    assert lock is not None
    if force:
        assert DistributedLock.objects.force_release(resource)
    else:
        wait_for(
            lambda: DistributedLock.objects.expires_in(resource) is None,
            what=f"the lock on {resource!r} to expire",
        )
    assert DistributedLock.objects.available_in(resource) is not None, "no lock-delay runs"
    return DistributedLock.objects.get(resource=resource)


def expire(resource: str, seconds_ago: float = 1) -> None:
    """Make the lock on ``resource`` expired ``seconds_ago`` by the database's clock."""
    from django_dlock.models import DistributedLock
    from django_dlock.rules.clock import expired_before

    DistributedLock.objects.filter(resource=resource).update(expires_at=expired_before(seconds_ago))


def wait_for(condition: Callable[[], Any], seconds: float = 10.0, what: str = "") -> Any:
    """Poll ``condition`` until it returns something true, and return that; fail
    the test after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {seconds} s waiting for {what or condition}")
        time.sleep(0.02)
    return value


def database_settings() -> dict[str, Any]:
    """What a worker process needs to open the test database the parent uses."""
    return {"NAME": connection.settings_dict["NAME"]}


def setup_worker(db: dict[str, Any]) -> None:
    """Start Django in a worker process, pointed at the parent's test database."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django
    from django.conf import settings

    # The settings type DATABASES as dj-database-url's TypedDict; ``db`` holds some of its keys.
    settings.DATABASES["default"].update(db)  # type: ignore[typeddict-item]
    django.setup()


def run_in_processes(
    target: Callable[..., Any], args_per_process: Sequence[tuple[Any, ...]]
) -> list[Any]:
    """Run ``target(*args)`` in one spawned OS process per entry; return the
    results in order. Arguments may include ``spawn.Barrier`` or ``spawn.Event``.
    A worker's exception fails the call with the worker's traceback."""
    results: Any = spawn.Queue()
    processes = [
        spawn.Process(target=_call, args=(index, results, target, args), daemon=True)
        for index, args in enumerate(args_per_process)
    ]
    for process in processes:
        process.start()
    outcomes: dict[int, Any] = {}
    failures: list[str] = []
    try:
        for _ in processes:
            index, ok, value = results.get(timeout=WORKER_TIMEOUT)
            outcomes[index] = value
            if not ok:
                failures.append(f"worker {index}:\n{value}")
    except queue.Empty:
        failures.append(f"a worker gave no result within {WORKER_TIMEOUT} s")
    finally:
        for process in processes:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
    if failures:
        raise AssertionError("\n".join(failures))
    return [outcomes[index] for index in range(len(processes))]


def _call(index: int, results: Any, target: Callable[..., Any], args: tuple[Any, ...]) -> None:
    try:
        results.put((index, True, target(*args)))
    except BaseException:
        results.put((index, False, traceback.format_exc()))


def run_in_thread(function: Any) -> dict[str, Any]:
    """Start ``function(outcome)`` in a thread; ``outcome`` receives its result or error."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["result"] = function(outcome)
        except BaseException as error:
            outcome["error"] = error
        finally:
            connection.close()

    outcome["thread"] = threading.Thread(target=target, daemon=True)
    outcome["thread"].start()
    return outcome


def postgres_dsn() -> str:
    """A libpq connection string for the test database (PostgreSQL)."""
    s = connection.settings_dict
    return f"host={s['HOST']} port={s['PORT']} user={s['USER']} dbname={s['NAME']}" + (
        f" password={s['PASSWORD']}" if s.get("PASSWORD") else ""
    )


def postgres_backend_alive(pid: int | None) -> bool:
    """Whether PostgreSQL's server process ``pid`` still runs (on the test's connection)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT EXISTS (SELECT FROM pg_stat_get_activity(%s))", [pid])
        return bool(cursor.fetchone()[0])


def is_waiting_on_a_lock(admin: Any, pid: int | None) -> bool:
    """Whether the PostgreSQL backend ``pid`` waits for a lock (``admin``: a psycopg connection)."""
    if pid is None:
        return False
    row = admin.execute(
        "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid]
    ).fetchone()
    return row is not None and row[0] == "Lock"


@contextmanager
def extra_database(alias: str, **settings_dict: Any) -> Iterator[BaseDatabaseWrapper]:
    """A database alias for the block only, in ``DATABASES`` and in ``connections``:
    ``settings_dict`` (ENGINE, NAME, HOST, PORT, ...) with Django's defaults. Its
    connection, if one was opened, is closed at the end."""
    from django.conf import settings
    from django.db import connections

    configured = connections.configure_settings({"default": {}, alias: dict(settings_dict)})[alias]
    # connections.settings is settings.DATABASES itself once Django has read it.
    for databases in (settings.DATABASES, connections.settings):
        databases[alias] = configured
    try:
        yield connections[alias]
    finally:
        connections[alias].close()
        del connections[alias]
        for databases in (settings.DATABASES, connections.settings):
            databases.pop(alias, None)


# Imports a module in a new interpreter in which the packages named in argv[1] cannot be
# imported (as if not installed), under a minimal configuration of Django.
_IMPORT_WITHOUT = """
import importlib, importlib.abc, sys
hidden, module = sys.argv[1].split(","), sys.argv[2]


class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if any(name == package or name.startswith(package + ".") for package in hidden):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, Hide())
import django
from django.conf import settings

settings.configure(
    INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "django_dlock"],
    DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
    USE_TZ=True,
)
django.setup()
try:
    importlib.import_module(module)
except ImportError as error:
    print(f"{type(error).__name__}: {error}")
else:
    print("imported")
"""


def import_without(module: str, *hidden: str) -> str:
    """What importing ``module`` gives where the packages ``hidden`` are not installed:
    "imported", or the ImportError raised ("ModuleNotFoundError: ...")."""
    result = subprocess.run(
        [sys.executable, "-c", _IMPORT_WITHOUT, ",".join(hidden), module],
        cwd=Path(__file__).resolve().parent.parent,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def stop_outside_a_write(pid: int) -> None:
    """SIGSTOP process ``pid`` where it holds no lock of the database's that the
    others need: stopped inside a write of SQLite's file (a look's refresh of its
    ticket, under a load that delayed it), or inside a lock transaction of
    PostgreSQL's portable operations (its row taken FOR UPDATE), it would keep
    every other process out until it resumed."""
    from django.db import connections

    connection = connections["default"]
    for _ in range(100):
        os.kill(pid, signal.SIGSTOP)
        if connection.vendor == "sqlite":
            held = _sqlite_write_held(connection.settings_dict["NAME"])
        elif connection.vendor == "postgresql":
            held = _postgresql_row_held(connection)
        else:
            return
        if not held:
            return
        os.kill(pid, signal.SIGCONT)  # let it finish
        time.sleep(0.02)
    raise AssertionError(f"process {pid} kept a lock of the database")


def _sqlite_write_held(name: str) -> bool:
    probe = sqlite3.connect(name, timeout=0.05)
    try:
        probe.execute("BEGIN IMMEDIATE")
        probe.execute("ROLLBACK")
        return False
    except sqlite3.OperationalError:
        return True
    finally:
        probe.close()


def _postgresql_row_held(connection: BaseDatabaseWrapper) -> bool:
    """Whether a transaction holds a row of the lock tables (or waits on one)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT EXISTS (SELECT FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
            "WHERE c.relname LIKE 'distributed_lock%%' AND l.pid <> pg_backend_pid() "
            "AND l.mode IN ('RowShareLock', 'RowExclusiveLock'))"
        )
        (held,) = cursor.fetchone()
    return bool(held)
