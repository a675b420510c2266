"""A throttle's use as one statement: count, decide and record (``throttle()``).

Each key has one row in ``distributed_lock_throttle_slots`` (its slot 0), which
keeps the times of its last uses (``ring``; the rule is ``rules.throttle``).
A use is one ``INSERT ... ON CONFLICT DO UPDATE`` (``ON DUPLICATE KEY UPDATE``
on MariaDB), sent in autocommit: it inserts a new key's row with its first use,
or locks the key's row, reads the database's clock once the lock is granted
(so the times of one key's uses are in order), decides, and writes the use (or,
refused, only the time of the refusal), answering what it decided with
``RETURNING``. One round trip; it reads one row whatever the rate.

A vendor's statement is in ``backends/<vendor>/throttles.py``; this module runs
it, as every lock operation runs: refused inside a transaction of the
caller's, and run again after a lost race that wrote nothing (an InnoDB
deadlock's victim).
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any, NamedTuple

from django.apps import apps
from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

from django_dlock.backends.transactions import (
    TransactionHooks,
    refuse_callers_transaction,
    run_again_after_lost_races,
)

if TYPE_CHECKING:
    from django.db.models import Model

__all__ = ["ThrottleAnswer", "ThrottleUses"]


class ThrottleAnswer(NamedTuple):
    """What a use's statement answered: the key's kept times after it, and the
    time of the refusal (microseconds since 1970), None when it granted."""

    ring: str
    refused_us: int | None


class ThrottleUses:
    """The uses of throttle keys on one alias; a vendor writes ``statement``."""

    def __init__(self, using: str, hooks: TransactionHooks) -> None:
        self.using = using
        self.hooks = hooks
        # Looked up by name: the models module imports the manager, which imports the backends.
        model: type[Model] = apps.get_model("django_dlock", "ThrottleSlot")
        qn = connections[using].ops.quote_name
        self.table = qn(model._meta.db_table)
        self.c = {
            field.attname: qn(field.column) for field in model._meta.concrete_fields if field.column
        }
        self._statement = cache(self.statement)

    @property
    def connection(self) -> BaseDatabaseWrapper:
        return connections[self.using]

    def use(self, key: str, limit: int, period_us: int, rate: str) -> ThrottleAnswer:
        """Grant (and record) or refuse one use of ``key``, in one statement of
        its own; ``LockTransactionError`` inside a transaction of the caller's."""
        connection = self.connection
        refuse_callers_transaction(self.using, connection)
        sql = self._statement(int(limit), int(period_us))
        params = {"key": key, "rate": rate}
        return run_again_after_lost_races(self.hooks, lambda: self._run(sql, params))

    def _run(self, sql: str, params: dict[str, Any]) -> ThrottleAnswer:
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            return self.answer(cursor.fetchone())

    def answer(self, row: Any) -> ThrottleAnswer:
        """The ``ThrottleAnswer`` of the statement's one row, ``(ring, refused)``."""
        ring, refused = row
        return ThrottleAnswer(ring, None if refused is None else self.refused_us(refused))

    def refused_us(self, refused: Any) -> int:
        """The refusal's time as the statement answered it, in microseconds since 1970."""
        return int(refused)

    def statement(self, limit: int, period_us: int) -> str:
        """The SQL of one use under ``limit`` per ``period_us`` (``%(key)s``,
        ``%(rate)s``): it answers one row, ``(ring, refused_us)``."""
        raise NotImplementedError
