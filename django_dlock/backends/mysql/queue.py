"""MariaDB's waiter queue: a dead waiter told by the named lock its connection
holds, and a waiter's wait at the gate of the holder or of the waiter just
ahead of it (``wake``)."""

from __future__ import annotations

from django.db import OperationalError

from django_dlock.backends.mysql.wake import ER_LOCK_DEADLOCK, HOLD_OWN_GATE, WAIT_AT_GATE, gate_of
from django_dlock.backends.queue import WaiterQueue
from django_dlock.rules import EXCLUSIVE

# The prefix of the named lock each waiting connection holds while it lives.
WAITER_LOCK = "django-dlock:waiter:"


class MySQLQueue(WaiterQueue):
    def session_pid(self) -> int | None:
        # The connection takes a named lock of its own id, which MariaDB
        # releases when the session ends, however it ends: IS_USED_LOCK() then
        # tells whether it lives. (information_schema.PROCESSLIST would tell
        # too, but reading it in the waiters' looks crashed a MariaDB 10.11
        # server under load, in its temporary tables.)
        with self.tables.connection.cursor() as cursor:
            cursor.execute(
                f"SELECT CONNECTION_ID(), GET_LOCK(CONCAT('{WAITER_LOCK}', CONNECTION_ID()), 0)"
            )
            (pid, taken) = cursor.fetchone()
        return int(pid) if taken == 1 else None

    def live_waiter_sql(self, alias: str = "") -> str:
        # A ticket whose waiter's connection is gone (its named lock free) is
        # a dead waiter's.
        pid = f"{alias}{self.tables.qn('listener_pid')}"
        return (
            f"{super().live_waiter_sql(alias)} AND ({pid} IS NULL OR "
            f"IS_USED_LOCK(CONCAT('{WAITER_LOCK}', {pid})) = {pid})"
        )

    def wait_for_release(
        self, resource: str, holder: str, seconds: float, own: str = ""
    ) -> bool | None:
        connection = self.tables.connection
        params = {
            "gate": gate_of(connection, self.tables.table, resource, holder),
            "own": gate_of(connection, self.tables.table, resource, own) if own else None,
            "seconds": round(seconds, 6),
        }
        with connection.cursor() as cursor:
            # Its own gate first (a NULL name is a no-op): the waiter behind it
            # may block there from now on (``wake``, the chain).
            try:
                cursor.execute(
                    WAIT_AT_GATE.replace("SELECT ", f"SELECT {HOLD_OWN_GATE}, ", 1), params
                )
            except OperationalError as error:
                # A cycle of gates: this session holds a gate that the session
                # whose gate it waits at waits for (a stale gate of a hold this
                # session lost; a paused or dead waiter's statement still blocked
                # in the server). MariaDB refuses the wait: nothing tells, it looks.
                if error.args and error.args[0] == ER_LOCK_DEADLOCK:
                    return None
                raise
            passed = cursor.fetchone()[-1]
        return None if passed == -1 else passed != 0

    def owner_ahead(self, resource: str, ticket: int) -> str | None:
        # Only an exclusive waiter holds a gate of its own: behind a reader or
        # a permit's waiter, nothing to wait at (None: the waiter polls).
        qn, before = self.tables.qn, self.queued_before_sql("%s", "%s")
        with self.tables.connection.cursor() as cursor:
            cursor.execute(
                f"SELECT w.{qn('owner')}, w.{qn('mode')} {before} "
                f"ORDER BY w.{qn('id')} DESC LIMIT 1",
                [resource, ticket],
            )
            row = cursor.fetchone()
        return None if row is None or row[1] != EXCLUSIVE else str(row[0])

    def leave_gate(self, resource: str, owner: str) -> None:
        gate = gate_of(self.tables.connection, self.tables.table, resource, owner)
        with self.tables.connection.cursor() as cursor:
            cursor.execute("DO RELEASE_LOCK(%s)", [gate])
