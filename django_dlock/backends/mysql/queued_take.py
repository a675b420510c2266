"""MariaDB's acquisition by a waiter of the exclusive lock: the head of the
queue, woken at the holder's gate (``wake``), takes the lock and leaves the
queue in one transaction of five round trips.

The portable acquisition costs eight round trips here: the gate's ``SELECT``,
``SET autocommit=0`` (Django's ``atomic()``), the row's ``SELECT ... FOR
UPDATE``, the ticket's ``SELECT``, the ``UPDATE``, the ticket's ``DELETE``,
``COMMIT`` and ``SET autocommit=1``. Here: ``START TRANSACTION`` (autocommit
stays on, so nothing needs turning back), the one-row ``UPDATE`` of
``one_row`` whose decision first asks that the ticket still counts and heads
its queue (``WaiterQueue.ticket_heads``: the rule's ``IS_HEAD``, composed),
the ``SELECT`` of what it kept, which also takes the new holder's gate, the
ticket's ``DELETE`` where it took the lock, and ``COMMIT``: five round trips,
one ``UPDATE`` that decides. The ticket is consumed in the transaction that
took the lock (no moment where the next waiter sees the new holder queued
ahead of it), and the gate is held before the lock is seen taken, as
``MySQLBackend._gated_take`` does. A refusal commits an ``UPDATE`` that left
the row as it was.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

from django.db import DatabaseError
from django.db.backends.base.base import BaseDatabaseWrapper

from django_dlock.backends.mysql import one_row
from django_dlock.backends.results import LockRow, Refusal, Taken

# What the acquisition did, where it decided: (action, the owner before, the
# row's values as the SELECT of what it kept answered them).
Decided = tuple[str, str, Sequence[Any]]


class QueuedTake:
    """The waiter's acquisition: ``queued_take`` (``one_row``), the ``SELECT``
    of what it kept (with the gate's column last), and the ``DELETE`` of the
    ticket where it still counts (``WaiterQueue.leave_counted_sql``)."""

    def __init__(self, take: str, kept: str, leave: str, *, gates: bool) -> None:
        self.take, self.kept, self.leave, self.gates = take, kept, leave, gates

    def run(self, connection: BaseDatabaseWrapper, params: dict[str, Any]) -> Decided | None:
        """Run it in a transaction of its own; None where the resource has no
        row (the portable operation inserts it), else what it decided.

        The ``UPDATE`` reads the clock and the queue as they were when it
        began, and may wait for the row's lock past its ticket's life (another
        session's lock transaction, a guarded block): the ``DELETE`` decides
        again at its own time, and where the ticket lapsed meanwhile the
        acquisition is rolled back and refused (the contract's invariant 10),
        and the gate it took given up, as where the transaction fails."""
        kept: list[str] = []  # the action of the SELECT that took the gate, once it ran
        with connection.cursor() as cursor:
            cursor.execute("START TRANSACTION")
            try:
                answer, lapsed = self._decide(cursor, params, kept)
                cursor.execute("ROLLBACK" if lapsed else "COMMIT")
            except BaseException:
                # The server rolled back a deadlock's victim already; a lock-wait
                # timeout leaves the transaction open. (A lost connection ends it,
                # and its gates.)
                with contextlib.suppress(DatabaseError):
                    cursor.execute("ROLLBACK")
                    if kept == [one_row.NEW] and self.gates:
                        cursor.execute("DO RELEASE_LOCK(%(gate)s)", params)
                raise
            if lapsed == one_row.NEW and self.gates:
                # The gate its kept SELECT took: not this session's to hold.
                cursor.execute("DO RELEASE_LOCK(%(gate)s)", params)
        return answer

    def _decide(
        self, cursor: Any, params: dict[str, Any], kept: list[str]
    ) -> tuple[Decided | None, str]:
        """What it decided, and the action rolled back where the ticket lapsed
        (""); ``kept`` gets the action once the SELECT of what it kept ran."""
        cursor.execute(self.take, params)
        # Django connects with CLIENT.FOUND_ROWS: the rows matched, changed or not.
        if cursor.rowcount != 1:
            return None, ""
        cursor.execute(self.kept, params)
        action, before, values = one_row.decided(cursor.fetchone())
        kept.append(action)
        if action in (one_row.NEW, one_row.AGAIN):
            cursor.execute(self.leave, [params["ticket"]])
            if cursor.rowcount != 1:  # the ticket lapsed (or went) while the UPDATE waited
                return (one_row.NOT_HEAD, before, values), action
        return (action, before, values), ""


def taken_of(answer: Decided, row_of: Callable[[Sequence[Any]], LockRow]) -> Taken | None:
    """The ``Taken`` of what the acquisition decided; None where the portable
    operation decides (shared holders)."""
    action, before, values = answer
    if action == one_row.PORTABLE:
        return None
    if action == one_row.NOT_HEAD:  # as the portable operation refuses a ticket
        return Taken(row=None, previous_owner=None, renewed=False)
    row = row_of(values)
    if action == one_row.REFUSED:  # the row as the UPDATE left it: untouched
        return Taken(row=None, previous_owner=before, renewed=False, refusal=Refusal.of(row))
    return Taken(row=row, previous_owner=before, renewed=action == one_row.AGAIN)
