"""MariaDB's waiter queue: a dead waiter told by the named lock its connection
holds, and the head's wait for the release at the resource's gate (``wake``)."""

from __future__ import annotations

from django_dlock.backends.mysql.wake import WAIT_AT_GATE, gate_of
from django_dlock.backends.queue import WaiterQueue

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

    def wait_for_release(self, resource: str, holder: str, seconds: float) -> bool | None:
        connection = self.tables.connection
        gate = gate_of(connection, self.tables.table, resource, holder)
        with connection.cursor() as cursor:
            cursor.execute(WAIT_AT_GATE, {"gate": gate, "seconds": round(seconds, 6)})
            (passed,) = cursor.fetchone()
        return None if passed == -1 else passed != 0
