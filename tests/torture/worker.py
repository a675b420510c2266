"""A torture process: ``python -m tests.torture.worker CONFIG_JSON``.

Roles: ``mix`` (random operations on a few contended resources until the stop
file appears), and the victims of the fault scenarios, which take a known
state, say ``ready`` on stdout, and wait for the runner to strike.
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import sys
import threading
from pathlib import Path
from typing import Any

import django


def main() -> None:
    config: dict[str, Any] = json.loads(sys.argv[1])
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.torture.settings")
    django.setup()
    from tests.torture.history import Recorder
    from tests.torture.operations import Operations
    from tests.torture.store import open_store

    name = config["name"]
    _name_connections(name)
    recorder = Recorder(config["history"], name)
    store = open_store(config["store_kind"], config["store"], f"torture/{name}/store")
    operations = Operations(recorder, store, random.Random())
    if config["wait_for_go"]:
        _connect()  # connected before the scenario starts
        if sys.stdin.readline().strip() != "go":
            return  # a spare the run did not need
        _drop_if_broken()  # the server may have restarted while this spare waited
    ROLES[config["role"]](operations, config)
    _say(f"done {operations.ops} {operations.sections}")


def _connect() -> None:
    """Connect, waiting out a restart of the server (a spare may start then)."""
    from django.db import DatabaseError, connection

    from tests.torture.history import pause

    for _ in range(600):
        try:
            connection.ensure_connection()
            return
        except DatabaseError:
            connection.close()
            pause(0.1)


def _drop_if_broken() -> None:
    from django.db import connection

    if not connection.is_usable():
        connection.close()


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _name_connections(name: str) -> None:
    """Give each PostgreSQL session an application_name that tells the runner
    whose it is: ``torture/<process>/main`` or ``torture/<process>/thread``
    (the auto-renew thread's)."""
    from django.db.backends.signals import connection_created

    def name_session(sender: Any, connection: Any, **kwargs: Any) -> None:
        if connection.vendor != "postgresql":
            return
        thread = "main" if threading.current_thread() is threading.main_thread() else "thread"
        with connection.cursor() as cursor:
            cursor.execute("SET application_name = %s", [f"torture/{name}/{thread}"])

    connection_created.connect(name_session, weak=False)


def mix(operations: Any, config: dict[str, Any]) -> None:
    """Random operations until the stop file exists."""
    rng, resources = operations.rng, config["resources"]
    stops = [Path(path) for path in config["stop_files"]]
    while not any(stop.exists() for stop in stops):
        resource = rng.choice(resources)
        roll = rng.random()
        ttl = rng.choice((0.5, 1.0, 2.0))
        body = rng.uniform(0, 0.003)
        if roll < 0.45:
            operations.manager_section(resource, ttl, body)
        elif roll < 0.65:
            operations.lock_section(resource, ttl, body, rng.uniform(0.2, 1.0), False)
        elif roll < 0.75:
            operations.lock_section(resource, ttl, body, None, False)
        elif roll < 0.77:
            operations.lock_section(resource, 0.6, 1.0, 2.0, True)  # body longer than the ttl
        elif roll < 0.87:
            stranger = f"{operations.name}.stranger"
            if rng.random() < 0.5:
                operations.release(resource, stranger)
            else:
                operations.renew(resource, stranger, ttl)
        elif roll < 0.90:
            operations.force_release(resource)
        elif roll < 0.94:
            operations.purge(command=rng.random() < 0.1)
        else:
            operations.manager_section(resource, ttl, 0)


def hold(operations: Any, config: dict[str, Any]) -> None:
    """Enter ``lock()`` on the resource, say ready, and stay inside for
    ``body`` seconds (the runner kills or pauses the process meanwhile). Then,
    as a holder that was paused would: write with its token anyway (the store
    must refuse it when another holder wrote since), renew, and leave."""
    from django_dlock import lock
    from tests.torture.history import now, pause

    resource, ttl = config["resource"], config["ttl"]
    context = lock(resource, owner=f"{operations.name}.0", ttl=ttl, timeout=30,
                   auto_renew=config.get("auto_renew", False))  # fmt: skip
    fields = {"resource": resource, "owner": f"{operations.name}.0", "ttl": ttl, "timeout": 30}
    entered = operations.enter_lock(context, fields)
    if entered is None:
        _say("failed")
        return
    handle, cs, _ = entered
    operations.fenced_write(cs, resource, handle.fencing_token)
    _say("ready")
    end = now() + config["body"]
    while now() < end:
        pause(0.05)
    if handle.lost.is_set():
        operations.told(cs, f"lost: {handle.lost_reason}")
    operations.fenced_write(cs, resource, handle.fencing_token)  # stale if paused
    if config.get("renew"):
        _renew_handle(operations, handle, cs)
    operations.leave_lock(context, handle, cs)


def _renew_handle(operations: Any, handle: Any, cs: str) -> None:
    from django.db import DatabaseError

    from django_dlock import LockExpired, LockNotOwned
    from tests.torture.history import error_fields, now

    t0 = now()
    fields = {"cs": cs, "resource": handle.resource, "owner": handle.owner, "ttl": handle.ttl}
    try:
        handle.renew()
    except (LockExpired, LockNotOwned, DatabaseError) as error:
        operations.recorder.write("renew", t0=t0, t1=now(), error=error_fields(error), **fields)
        operations.told(cs, f"renew: {type(error).__name__}")
    else:
        lock = {"owner": handle.owner, "token": handle.fencing_token}
        lock["expires_at"] = handle.expires_at.isoformat()
        operations.recorder.write("renew", t0=t0, t1=now(), lock=lock, **fields)


def wait(operations: Any, config: dict[str, Any]) -> None:
    """Wait in ``lock(timeout=...)`` for a resource the runner holds."""
    _say("ready")
    operations.lock_section(config["resource"], 5.0, 0, config["timeout"], False)


def every_call(operations: Any, config: dict[str, Any]) -> None:
    """Each lock call once, against a database that cannot take writes. The
    runner holds ``resource`` for this process's ``owner``, so
    that every call has something to write; ``free`` was never locked."""
    resource, owner, free = config["resource"], config["owner"], config["free"]
    operations.acquire(resource, owner, 5)
    operations.renew(resource, owner, 5)
    operations.release(resource, owner)
    operations.force_release(resource)
    operations.purge(command=False)
    operations.lock_section(free, 5, 0, None, False)
    operations.lock_section(free, 5, 0, 1.0, False)


def sqlite_write_lock(operations: Any, config: dict[str, Any]) -> None:
    """Hold SQLite's write lock on the lock database, mid-write, until killed."""
    from django.db import connection

    from tests.torture.history import pause

    db = sqlite3.connect(connection.settings_dict["NAME"], timeout=60, isolation_level=None)
    db.execute("BEGIN IMMEDIATE")
    db.execute("UPDATE distributed_locks SET owner = owner")  # dirty pages, a hot journal
    _say("ready")
    pause(3600)


def section(operations: Any, config: dict[str, Any]) -> None:
    """One acquire, critical section and release of the resource."""
    operations.manager_section(config["resource"], 5.0, 0)


ROLES = {
    "mix": mix,
    "section": section,
    "hold": hold,
    "wait": wait,
    "every_call": every_call,
    "sqlite_write_lock": sqlite_write_lock,
}

if __name__ == "__main__":
    main()
