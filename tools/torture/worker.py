"""A torture process: ``python -m tools.torture.worker CONFIG_JSON``.

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
    if "FAKETIME" in os.environ:
        _sleep_under_faketime()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tools.torture.settings")
    django.setup()
    from tools.torture.history import Recorder
    from tools.torture.kinds import KindOperations
    from tools.torture.store import open_store

    name = config["name"]
    _name_connections(name, Path(config["sessions"]))
    recorder = Recorder(config["history"], name)
    store = open_store(config["store"], f"torture/{name}/store")
    operations = KindOperations(recorder, store, random.Random())
    if config.get("head_faults"):
        from tools.torture.head_faults import HeadFaults

        HeadFaults(recorder, config["head_faults"]).install()
    if config["wait_for_go"]:
        _connect()  # connected before the scenario starts
        if sys.stdin.readline().strip() != "go":
            return  # a spare the run did not need
        _drop_if_broken()  # the server may have restarted while this spare waited
    ROLES[config["role"]](operations, config)
    _say(f"done {operations.ops} {operations.sections}")


def _sleep_under_faketime() -> None:
    """Under libfaketime with the monotonic clock left alone (the history's
    clock), ``time.sleep`` fails with EINVAL (libfaketime mangles the absolute
    monotonic deadline of Python's clock_nanosleep): an artefact of the fake
    clock, not of a skewed host, so this process sleeps on an event instead
    (the library's ``lock([...])`` backs off with ``time.sleep``)."""
    import time
    from typing import SupportsIndex

    from tools.torture.history import pause

    def sleep(seconds: float | SupportsIndex) -> None:
        pause(float(seconds))

    time.sleep = sleep


def _connect() -> None:
    """Connect, waiting out a restart of the server (a spare may start then)."""
    from django.db import DatabaseError, connection

    from tools.torture.history import pause

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


def _name_connections(name: str, sessions: Path) -> None:
    """Say which database session is whose, for the runner to terminate:
    PostgreSQL's application_name ``torture/<process>/main`` or
    ``torture/<process>/thread`` (the auto-renew thread's); MariaDB has none,
    so the connection's id goes to ``sessions``/``torture+<process>+<thread>.id``."""
    from django.db.backends.signals import connection_created

    def name_session(sender: Any, connection: Any, **kwargs: Any) -> None:
        thread = "main" if threading.current_thread() is threading.main_thread() else "thread"
        session = f"torture/{name}/{thread}"
        with connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                cursor.execute("SET application_name = %s", [session])
            elif connection.vendor == "mysql":
                cursor.execute("SELECT CONNECTION_ID()")
                path = sessions / (session.replace("/", "+") + ".id")
                new = path.with_name(f"{path.name}.{threading.get_ident()}")
                new.write_text(str(cursor.fetchone()[0]))
                new.replace(path)  # at once: the runner never reads half an id

    connection_created.connect(name_session, weak=False)


def mix(operations: Any, config: dict[str, Any]) -> None:
    """Random calls of every kind until the stop file exists (``tools.torture.mix``)."""
    from tools.torture.mix import mix as random_calls

    random_calls(operations, config)


def hold(operations: Any, config: dict[str, Any]) -> None:
    """Enter ``lock()`` on the resource (``kind``: exclusive, shared, a permit
    of ``limit``, or a leader waiting without end), say ready, and stay inside
    for ``body`` seconds (the runner kills or pauses the process meanwhile).
    Then, as a holder that was paused would: write (a reader: read) with its
    token anyway (the store must refuse it when a later holder wrote since),
    renew, and leave."""
    from django_dlock import lock
    from tools.torture.asked import Asked
    from tools.torture.history import now, pause

    resource, ttl, kind = config["resource"], config["ttl"], config.get("kind", "exclusive")
    asked = Asked(
        shared=kind == "shared", limit=config.get("limit"), leader=kind == "leader",
        lock_delay=config.get("lock_delay"),
    )  # fmt: skip
    timeout = float("inf") if asked.leader else 30
    owner = f"{operations.name}.0"
    context = lock(
        resource, owner=owner, ttl=ttl, timeout=timeout,
        auto_renew=config.get("auto_renew", False) or asked.leader,
        label=f"{operations.name} {kind}", **asked.arguments(),
    )  # fmt: skip
    fields = {"resource": resource, "owner": owner, "ttl": ttl, "timeout": timeout}
    entered = operations.enter_lock(context, fields | asked.fields(), asked)
    if entered is None:
        _say("failed")
        return
    handle, cs, _ = entered

    def touch() -> None:  # the work its kind does with the guarded store
        if asked.kind == "shared":
            operations.fenced_read(cs, resource, handle.fencing_token)
        elif asked.kind != "permit":
            operations.fenced_write(cs, resource, handle.fencing_token)

    touch()
    _say("ready")
    end = now() + config["body"]
    while now() < end:
        pause(0.05)
    if handle.lost.is_set():
        operations.told(cs, f"lost: {handle.lost_reason}")
    touch()  # stale if paused
    if config.get("renew"):
        _renew_handle(operations, handle, cs)
    operations.leave_lock(context, handle, cs)


def _renew_handle(operations: Any, handle: Any, cs: str) -> None:
    from django.db import DatabaseError

    from django_dlock import LockExpired, LockNotOwned
    from tools.torture.history import error_fields, now

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
    from django_dlock.models import DistributedLock
    from tools.torture.asked import Asked
    from tools.torture.paced import every_paced_call

    resource, owner, free = config["resource"], config["owner"], config["free"]
    operations.acquire(resource, owner, 5)
    operations.acquire(resource, owner, 5, Asked(reentrant=True))
    operations.renew(resource, owner, 5)
    operations.release(resource, owner)
    operations.call(
        "release_all",
        lambda: {
            "results": [r.value for r in DistributedLock.objects.release_all([resource], owner)]
        },
        resources=[resource],
        owner=owner,
        set=owner,
    )
    operations.force_release(resource)
    operations.force_release(resource, owner)
    operations.purge(command=False)
    operations.lock_section(free, 5, 0, None, False)
    operations.lock_section(free, 5, 0, 1.0, False)
    operations.acquire(f"{free}:shared", f"{owner}.reader", 5, Asked(shared=True))
    operations.lock_section(f"{free}:shared", 5, 0, 1.0, False, Asked(shared=True))
    operations.acquire(f"{free}:sem", f"{owner}.permit", 5, Asked(limit=2))
    operations.lock_section(f"{free}:sem", 5, 0, 1.0, False, Asked(limit=2))
    operations.several_section([(f"{free}:a", False), (f"{free}:b", True)], 5, 0, None)
    operations.several_section([(f"{free}:b", True), (f"{free}:a", False)], 5, 0, 1.0)
    every_paced_call(operations, free)


def sqlite_write_lock(operations: Any, config: dict[str, Any]) -> None:
    """Hold SQLite's write lock on the lock database, mid-write, until killed."""
    from django.db import connection

    from tools.torture.history import pause

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
