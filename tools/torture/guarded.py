"""Guarded writes: a load of writes proven under the lock (``held.atomic()``).

A guarded writer holds a read-write resource with ``lock()``, works a while
(long enough, now and then, for its lease to run out or a fault to land),
then in ``handle.atomic()`` takes the next number of the resource's sequence
(``torture_guarded_seq``: the UPDATE's row lock orders the commits) and writes
a row (``torture_guarded``: resource, token, write id, number). The tables are
in the lock database, beside the lock table, as the feature requires.

The checker (``check_guarded``, invariant 18) reads the rows back: along each
resource's sequence the tokens never go down, and no row was written by a
block that began after a later grant of its resource had returned.
"""

from __future__ import annotations

import random
from typing import Any

from django.db import DatabaseError, connection

from django_dlock import DlockError, LockLost, lock
from tools.torture.history import error_fields, now, pause

__all__ = ["create", "dump", "guarded_writer"]

SCHEMA = {
    "postgresql": (
        "CREATE TABLE IF NOT EXISTS torture_guarded (id bigserial PRIMARY KEY, resource text, "
        "token bigint, write_id text, seq bigint)",
        "CREATE TABLE IF NOT EXISTS torture_guarded_seq (resource text PRIMARY KEY, seq bigint)",
    ),
    "mysql": (
        "CREATE TABLE IF NOT EXISTS torture_guarded (id bigint AUTO_INCREMENT PRIMARY KEY, "
        "resource varchar(255), token bigint, write_id varchar(255), seq bigint) ENGINE=InnoDB",
        "CREATE TABLE IF NOT EXISTS torture_guarded_seq (resource varchar(255) PRIMARY KEY, "
        "seq bigint) ENGINE=InnoDB",
    ),
    "sqlite": (
        "CREATE TABLE IF NOT EXISTS torture_guarded (id integer PRIMARY KEY AUTOINCREMENT, "
        "resource text, token bigint, write_id text, seq bigint)",
        "CREATE TABLE IF NOT EXISTS torture_guarded_seq (resource text PRIMARY KEY, seq bigint)",
    ),
}


def create(resources: list[str]) -> None:
    """The tables, in the lock database, with a sequence row per resource."""
    with connection.cursor() as cursor:
        for statement in SCHEMA[connection.vendor]:
            cursor.execute(statement)
        cursor.execute("DELETE FROM torture_guarded_seq")
        for resource in resources:
            cursor.execute("INSERT INTO torture_guarded_seq VALUES (%s, 0)", [resource])


def dump() -> dict[str, Any]:
    """The guarded rows as committed: [seq, resource, token, write_id] each."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT seq, resource, token, write_id FROM torture_guarded")
        return {"rows": [list(row) for row in cursor.fetchall()]}


def guarded_writer(ops: Any, rng: random.Random, config: dict[str, Any]) -> None:
    """``with lock(...)``, work, then one guarded write; a third of them work
    past their ttl (their block must be refused, or commit before anyone
    else took the lock)."""
    resource = rng.choice(config["resources"])
    ttl = rng.uniform(0.3, 1.0)
    owner = ops.owner()
    context = lock(resource, owner=owner, ttl=ttl, timeout=rng.uniform(0.2, 1.5))
    fields = {"resource": resource, "owner": owner, "ttl": ttl, "timeout": None}
    entered = ops.enter_lock(context, fields)
    if entered is None:
        return
    handle, cs, _ = entered
    pause(rng.uniform(0, ttl * (1.5 if rng.random() < 0.3 else 0.5)))
    write_id = f"{cs}#guarded"
    t0 = now()
    outcome: dict[str, Any] = {}
    try:
        with handle.atomic(), connection.cursor() as cursor:
            cursor.execute(
                "UPDATE torture_guarded_seq SET seq = seq + 1 WHERE resource = %s", [resource]
            )
            cursor.execute("SELECT seq FROM torture_guarded_seq WHERE resource = %s", [resource])
            (seq,) = cursor.fetchone()
            cursor.execute(
                "INSERT INTO torture_guarded (resource, token, write_id, seq) "
                "VALUES (%s, %s, %s, %s)",
                [resource, handle.fencing_token, write_id, seq],
            )
            pause(rng.uniform(0, 0.02))  # a holder paused inside its block
        outcome = {"committed": True, "seq": seq}
    except LockLost as error:
        outcome = {"committed": False, "refused": str(error)}
    except (DatabaseError, DlockError) as error:
        outcome = {"error": error_fields(error)}  # maybe ended by the database: no answer
        ops.reset()
    ops.recorder.write(
        "guarded_write",
        cs=cs,
        resource=resource,
        write_id=write_id,
        token=handle.fencing_token,
        t0=t0,
        t1=now(),
        **outcome,
    )
    ops.leave_lock(context, handle, cs)
