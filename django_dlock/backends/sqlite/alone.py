"""SQLite's common exclusive take and release, each one statement in
autocommit where the resource's row settles it (``AloneStatements``).

A portable lock operation on SQLite is five statements and a Python decision
between them (``BEGIN IMMEDIATE``, the row's ``SELECT``, the write, ``COMMIT``,
and the busy timeout's reads and writes around them), and on a database in the
client's own process their cost is the client's CPU. The take of a released
resource (or of one without a row yet) and the release of an exclusive hold
that nobody waits for are settled by the row alone, so each is one statement,
which SQLite runs as a transaction of its own: a write statement takes the
database's write lock before it reads, as ``BEGIN IMMEDIATE`` does, so the
row it judges is the row it writes. Where the statement writes nothing, the
portable operation decides (an expired holder's row, whose owner the
``lock_taken_over`` signal names; the owner's own again; shared holders; a
queue), at the cost of one statement more; a take refused by another's hold
(or a running lock-delay) is refused on a read of the row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from django.db import connections

from django_dlock.backends.admission import Action, admit
from django_dlock.backends.base import LockBackend
from django_dlock.backends.results import LockRow, Refusal, Released, Taken
from django_dlock.backends.transactions import (
    in_lock_transaction,
    refuse_callers_transaction,
    run_again_after_lost_races,
)
from django_dlock.rules import ReleaseResult
from django_dlock.rules.claim import Claim
from django_dlock.rules.predicates import FREE_FOR_OWNER, HELD_BY_OWNER

# The parameters the statements name (``%(name)s``, as Django's SQLite cursor takes them).
_NAMES = ("resource", "owner", "duration", "label", "lock_delay", "held")


class Statement:
    """A statement as Django's cursor takes it (``sql``) and as the driver's
    connection does (``raw``: Django's SQLite cursor makes ``%(name)s``
    ``:name``, and ``%%`` ``%``, the same way)."""

    def __init__(self, sql: str) -> None:
        self.sql = sql
        self.raw = sql % {name: f":{name}" for name in _NAMES}


class AloneStatements:
    """``take`` and ``release`` of one alias (see the module's docstring); each
    answers the lock's row as written and the database's now, or no row where
    it wrote nothing."""

    def __init__(self, backend: LockBackend) -> None:
        # Only quoted identifiers and Django-compiled SQL are formatted in; values are parameters.
        tables = backend.tables
        c, table = tables.column_sql, tables.table
        rule_row = tables.sql_row
        now = rule_row.now
        answer = f"RETURNING {', '.join(tables.columns)}, {now}"
        # A first row: its token above the largest ever purged (``LockRows.insert_values``).
        first = {
            "resource": "%(resource)s",
            "owner": "%(owner)s",
            "acquired_at": now,
            "expires_at": rule_row.plus(now, "%(duration)s"),
            "fencing_token": f"COALESCE(({backend.rows.floor_sql()}), 0) + 1",
            "hold_count": "1",
            "label": "%(label)s",
            "limit": "NULL",
            "lock_delay": "%(lock_delay)s",
        }
        # A row that exists is taken only where it was released (so the claim
        # takes nobody's lock over) and is free for the claim by the rule
        # (no lock-delay runs): a new holder, a larger token.
        taken = ", ".join(
            [f"{c[name]} = excluded.{c[name]}" for name in ("owner", "acquired_at", "expires_at")]
            + [f"{c['fencing_token']} = {table}.{c['fencing_token']} + 1"]
            + [f"{c['hold_count']} = 1", f"{c['label']} = excluded.{c['label']}"]
            + [f"{c['limit']} = NULL", f"{c['lock_delay']} = excluded.{c['lock_delay']}"]
        )
        free = FREE_FOR_OWNER.sql(rule_row.aliased(f"{table}."))

        def take(only: str) -> Statement:
            return Statement(
                f"INSERT INTO {table} ({', '.join(c[name] for name in first)}) "
                f"SELECT {', '.join(first.values())} WHERE {only} ON CONFLICT ({c['resource']}) "
                f"DO UPDATE SET {taken} WHERE {table}.{c['owner']} = '' AND {free} AND {only} "
                f"{answer}"
            )

        self.take = take("1")
        # A blocking lock()'s first take (``Claim.behind_queue``): the same, only
        # where nobody is queued (``WaiterQueue.nobody_queued``).
        self.take_behind = take(backend.queue.nobody_queued("%(resource)s"))
        # The owner's release of its exclusive hold: one hold of several goes
        # (reentrant), or the last, where nobody is queued for the resource
        # (not even a dead waiter: the portable release hands the lock to the
        # head, or drops the dead). The row stays, released, to keep the
        # fencing token counting (``LockBackend._give_up``).
        kept = f"{c['hold_count']} > 1"
        self.release = Statement(
            f"UPDATE {table} SET "  # noqa: S608
            f"{c['owner']} = CASE WHEN {kept} THEN {c['owner']} ELSE '' END, "
            f"{c['expires_at']} = CASE WHEN {kept} THEN {c['expires_at']} ELSE {now} END, "
            f"{c['hold_count']} = CASE WHEN {kept} THEN {c['hold_count']} - 1 "
            f"ELSE {c['hold_count']} END, "
            f"{c['limit']} = CASE WHEN {kept} THEN {c['limit']} END, "
            f"{c['lock_delay']} = CASE WHEN {kept} THEN {c['lock_delay']} END "
            f"WHERE {c['resource']} = %(resource)s AND {HELD_BY_OWNER.sql(rule_row)} "
            f"AND ({kept} OR NOT EXISTS (SELECT 1 FROM {tables.waiters_table} w "
            f"WHERE w.{tables.qn('resource')} = %(resource)s)) {answer}"
        )


class Alone:
    """Runs ``AloneStatements`` for one backend."""

    def __init__(self, backend: LockBackend) -> None:
        self.backend = backend
        self.statements = AloneStatements(backend)

    def take(self, claim: Claim) -> Taken | None:
        """An exclusive claim's take where the row settles it (no ticket, no
        re-entered grant: the caller checks); None: the portable operation
        decides."""
        rows = self.backend.rows
        params = {
            "resource": claim.resource,
            "owner": claim.owner,
            "duration": rows.duration_value(claim.duration),
            "label": claim.label,
            "lock_delay": rows.duration_value(claim.lock_delay),
            "held": None,
        }
        statements = self.statements
        row = self._run(statements.take_behind if claim.behind_queue else statements.take, params)
        if row is not None:
            # Released before, or no row: nobody's lock was taken over.
            return Taken(row=row, previous_owner="", renewed=False)
        # Nothing written: where the row, read now, shows the lock held by
        # another holder (or a lock-delay running), the rule refuses the claim
        # at this read (``admit``), and the refusal says why; else the portable
        # operation decides under the write lock.
        header = self.backend.tables.fetch_row(rows.read_sql, [claim.resource])
        if header is None or header.held_by_shared:
            return None
        if admit(header, [], claim, (0, 0)).action is not Action.REFUSE:
            return None
        return Taken(
            row=None, previous_owner=header.owner, renewed=False, refusal=Refusal.of(header)
        )

    def release(self, resource: str, owner: str) -> Released | None:
        """The owner's release of its exclusive hold where nobody waits; None:
        the portable operation decides."""
        row = self._run(self.statements.release, {"resource": resource, "owner": owner})
        if row is None:
            return None
        if row.owner:  # one hold of several went
            return Released(row=row, owner=row.owner, result=ReleaseResult.DECREMENTED)
        # The row comes back as released (no owner). (``Released.released``
        # lists a force-release's holds: none here.)
        return Released(row=row, owner=owner, result=ReleaseResult.RELEASED)

    def _run(self, statement: Statement, params: dict[str, Any]) -> LockRow | None:
        """Run ``statement`` as a transaction of its own; the lock's row it
        answers, or None.

        Inside Django's TestCase transaction, in a lock transaction (a
        savepoint), as every operation; inside a transaction of the caller's,
        ``LockTransactionError``. Else in autocommit, with the busy timeout at
        0 for it and run again after a busy database in short steps, as a lock
        transaction is (``SQLiteBackend.transaction``), through Django's
        cursor where an execute wrapper or the query log would see it, else
        on the driver's connection, which costs the client less.
        """
        backend = self.backend
        connection = connections[backend.using]
        if connection.atomic_blocks:
            answer = in_lock_transaction(backend, lambda: self._on_cursor(statement, params))
            return None if answer is None else backend.tables.row(answer, connection)
        refuse_callers_transaction(backend.using, connection)
        watched = bool(connection.execute_wrappers or connection.queries_logged)

        def attempt() -> Sequence[Any] | None:
            connection.ensure_connection()  # (and Django's refusal inside an event loop)
            session = connection.connection
            (busy_ms,) = session.execute("PRAGMA busy_timeout").fetchone()
            session.execute("PRAGMA busy_timeout = 0")
            try:
                if watched:
                    return self._on_cursor(statement, params)
                with connection.wrap_database_errors:
                    return cast(
                        Sequence[Any] | None, session.execute(statement.raw, params).fetchone()
                    )
            finally:
                if connection.connection is session:  # not closed meanwhile
                    session.execute(f"PRAGMA busy_timeout = {int(busy_ms)}")

        answer = run_again_after_lost_races(backend, attempt)
        return None if answer is None else backend.tables.row(answer, connection)

    def _on_cursor(self, statement: Statement, params: dict[str, Any]) -> Sequence[Any] | None:
        with self.backend.connection.cursor() as cursor:
            cursor.execute(statement.sql, params)
            return cast(Sequence[Any] | None, cursor.fetchone())
