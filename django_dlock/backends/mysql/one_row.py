"""MariaDB's exclusive acquire and release as one ``UPDATE`` each, and a read
of what it decided.

A lock transaction costs five round trips on MariaDB through mysqlclient:
``SET autocommit=0`` (Django's ``atomic()``), ``SELECT ... FOR UPDATE``, the
write, ``COMMIT`` and ``SET autocommit=1``; the floor, one statement, costs
one. Here the decision is written in the ``UPDATE``, which InnoDB runs in
autocommit as a transaction of its own, holding the row's lock while it reads
and writes it (a locking read of the latest version, as ``FOR UPDATE`` is):
one round trip. MariaDB has no ``UPDATE ... RETURNING``, so the statement keeps
what it decided and the row as it left it in session variables, assigned as
its assignments run (left to right, each one reading the columns as the ones
before it left them), and a ``SELECT`` of those variables, which reads no
table, answers: two round trips in all. (mysqlclient sends one statement at a
time: Django does not turn on multi-statements.) Both are prepared in each
session that runs them more than twice (``prepared``), and their answer is
converted by ``KeptRow``.

The ``UPDATE`` decides only what the row alone settles, as PostgreSQL's
statements do: a resource without a row yet, or held by shared holders, is
the portable operation's (``PORTABLE``), as is a waiter's acquisition, which
also leaves the queue in its transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from functools import cached_property
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.base.operations import BaseDatabaseOperations
from django.db.backends.mysql.operations import DatabaseOperations

from django_dlock.backends.results import LockRow
from django_dlock.backends.tables import LockTables
from django_dlock.django_private import compile_expression
from django_dlock.rules import SHARED_HOLDERS
from django_dlock.rules.clock import DatabaseNow
from django_dlock.rules.predicates import DELAY_RUNS, HELD, HELD_BY_SHARED

# The decisions (the variable @dlock_act).
PORTABLE = "portable"
REFUSED = "refused"
NEW = "new"  # a new holder
AGAIN = "again"  # the holder again
RELEASED = "released"
DECREMENTED = "decremented"
FORBIDDEN = "forbidden"
NOT_FOUND = "not_found"
NOT_HEAD = "not_head"  # a waiter's ticket no longer counts, is not the head; or others wait

# The session variable that keeps the value a column was written with.
_KEPT = "@dlock_{}"
# SQL: a time kept in a variable, as the text of a DATETIME(6) ("2026-12-05
# 20:48:38.123456", every digit of the microseconds), NULL as NULL.
_TIME_TEXT = "CAST(CAST({} AS DATETIME(6)) AS CHAR)"


class OneRowStatements:
    """``take`` and ``release`` of the exclusive lock on one alias: the
    ``UPDATE`` and the ``SELECT`` of what it kept."""

    def __init__(self, tables: LockTables, queued: str, nobody_queued: str) -> None:
        """``queued``: SQL, the ticket ``%(ticket)s`` still counts and heads the
        queue of ``%(resource)s`` (``WaiterQueue.ticket_heads``); ``nobody_queued``:
        SQL, no live waiter of ``%(resource)s`` is queued (``WaiterQueue.nobody_queued``)."""
        # Only quoted identifiers, constants and Django-compiled SQL are
        # formatted in; values are parameters.
        c, table = tables.column_sql, tables.table
        now_sql, _ = compile_expression(tables.using, DatabaseNow())
        # The database's now: one value for the whole statement.
        valid = HELD.sql(tables.sql_row)
        # The first assignment decides, on the row as it was; the id, the owner
        # and the database's now are kept on the way. (The optimizer drops an
        # assignment whose value it can tell without it: "(@v := a NOT NULL
        # expression) IS NULL" is false, and @v is left as it was. The length
        # of their concatenation it must compute.)
        first = (
            f"WHEN CHAR_LENGTH(CONCAT(@dlock_id := {c['id']}, @dlock_before := {c['owner']}, "
            f"@dlock_now := {now_sql})) = 0 THEN NULL"
        )
        shared = HELD_BY_SHARED.sql(tables.sql_row)
        # The holder lost it with a lock-delay that still runs.
        delayed = DELAY_RUNS.sql(tables.sql_row)

        def kept(name: str, value: str) -> str:
            """An assignment of ``value`` to the column ``name`` that keeps it."""
            return f"{c[name]} = ({_KEPT.format(name)} := {value})"

        # Acquire: free, a new holder and the next token; the holder again, a
        # later expiry (one hold more, reentrant); a re-entry (``held``) only
        # of the grant of that token.
        def take_decision(queued: str) -> str:
            """The decision; ``queued``: SQL, a waiter's ticket (``%(ticket)s``)
            counts and heads its queue, decided first (else ``NOT_HEAD``)."""
            ticket = f"WHEN NOT ({queued}) THEN '{NOT_HEAD}' " if queued else ""
            return (
                f"CASE {first} {ticket}WHEN {shared} THEN '{PORTABLE}' "
                f"WHEN {valid} AND {c['owner']} <> %(owner)s THEN '{REFUSED}' "
                f"WHEN {valid} THEN IF(%(held)s IS NULL OR {c['fencing_token']} = %(held)s, "
                f"'{AGAIN}', '{REFUSED}') "
                f"WHEN {delayed} THEN '{REFUSED}' "
                f"ELSE IF(%(held)s IS NULL, '{NEW}', '{REFUSED}') END"
            )

        acting = "@dlock_act = '{}'".format

        def take(queued: str) -> str:
            return (
                f"UPDATE {table} SET "  # noqa: S608
                + ", ".join(take_assignments(take_decision(queued)))
                + f" WHERE {c['resource']} = %(resource)s"
            )

        def take_assignments(decision: str) -> list[str]:
            return [
                kept(
                    "acquired_at",
                    f"IF((@dlock_act := {decision}) = '{NEW}', {now_sql}, {c['acquired_at']})",
                ),
                kept(
                    "owner",
                    f"IF({acting(NEW)}, %(owner)s, {c['owner']})",
                ),
                kept(
                    "expires_at",
                    f"IF({acting(NEW)} OR {acting(AGAIN)}, {now_sql} + INTERVAL "
                    f"%(microseconds)s MICROSECOND, {c['expires_at']})",
                ),
                kept(
                    "fencing_token",
                    f"IF({acting(NEW)}, {c['fencing_token']} + 1, {c['fencing_token']})",
                ),
                kept(
                    "hold_count",
                    f"CASE WHEN {acting(NEW)} THEN 1 WHEN {acting(AGAIN)} "
                    f"THEN {c['hold_count']} + %(reentrant)s ELSE {c['hold_count']} END",
                ),
                kept("label", f"IF({acting(NEW)}, %(label)s, {c['label']})"),
                kept("limit", f"IF({acting(NEW)}, NULL, {c['limit']})"),
                # The holder again: a delay asked for replaces the grant's.
                kept(
                    "lock_delay",
                    f"CASE WHEN {acting(NEW)} THEN %(lock_delay)s WHEN {acting(AGAIN)} "
                    f"THEN COALESCE(%(lock_delay)s, {c['lock_delay']}) ELSE {c['lock_delay']} END",
                ),
            ]

        self.take = take("")
        # A waiter's: its ticket (``%(ticket)s``) decided first (``queued``).
        self.queued_take = take(queued)
        # A blocking lock()'s first take, before it queues (``Claim.behind_queue``):
        # only where nobody is queued (else ``NOT_HEAD``: it queues, and looks).
        self.take_behind = take(nobody_queued)

        # Release: one hold of several goes; the last leaves the row expired
        # and ownerless, to keep the fencing token counting.
        release_decision = (
            f"CASE {first} WHEN NOT ({valid}) THEN '{NOT_FOUND}' "
            f"WHEN {c['owner']} = '{SHARED_HOLDERS}' THEN '{PORTABLE}' "
            f"WHEN {c['owner']} <> %(owner)s THEN '{FORBIDDEN}' "
            f"WHEN {c['hold_count']} > 1 THEN '{DECREMENTED}' ELSE '{RELEASED}' END"
        )
        self.release = (
            f"UPDATE {table} SET "  # noqa: S608
            + ", ".join(
                [
                    kept(
                        "hold_count",
                        f"IF((@dlock_act := {release_decision}) = '{DECREMENTED}', "
                        f"{c['hold_count']} - 1, {c['hold_count']})",
                    ),
                    kept(
                        "owner",
                        f"IF({acting(RELEASED)}, '', {c['owner']})",
                    ),
                    kept("expires_at", f"IF({acting(RELEASED)}, {now_sql}, {c['expires_at']})"),
                    # A release by the holder leaves no lock-delay behind.
                    kept("lock_delay", f"IF({acting(RELEASED)}, NULL, {c['lock_delay']})"),
                    *(
                        kept(name, c[name])
                        for name in ("acquired_at", "fencing_token", "label", "limit")
                    ),
                ]
            )
            + f" WHERE {c['resource']} = %(resource)s"
        )

        # What the UPDATE kept: its decision, the owner before, and the row as
        # written, typed again (a variable keeps a time as text, and a sum as
        # a decimal). A time is answered as text, ISO 8601 with microseconds,
        # which ``KeptRow`` parses in one call of C: mysqlclient's converter of
        # a DATETIME costs the client a dozen calls per value.
        def column(name: str) -> str:
            if name == "resource":
                return "%(resource)s"
            kept = "@dlock_id" if name == "id" else _KEPT.format(name)
            kind = tables.fields[name].get_internal_type()
            if kind == "DateTimeField":
                return _TIME_TEXT.format(kept)
            if kind.endswith(("IntegerField", "AutoField")) or kind == "DurationField":
                return f"CAST({kept} AS SIGNED)"
            return kept

        self.kept = (
            f"SELECT @dlock_act, @dlock_before, {', '.join(column(name) for name in c)}, "
            + _TIME_TEXT.format("@dlock_now")
        )


def decided(answer: Sequence[Any]) -> tuple[str, str, Sequence[Any]]:
    """The decision, the owner before, and the row's values from the ``SELECT``
    (less its last column, the gate's: ``wake.kept_with_gate``)."""
    action, before = answer[0], answer[1]
    # (Text, as mysqlclient answers a variable's string: no call to make it so.)
    return (
        action if type(action) is str else _text(action),
        before if type(before) is str else _text(before),
        answer[2:-1],
    )


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


fromisoformat = datetime.fromisoformat

# A time's converters: (the indexes of the aware ones, of the naive ones (no
# converter: USE_TZ off), of durations, and of any other with its converter).
_Plan = tuple[list[int], list[int], list[int], list[tuple[int, Callable[[Any, Any], Any]]]]


class KeptRow:
    """The ``LockRow`` of the values the ``SELECT`` of what an ``UPDATE`` kept
    answers, as ``tables.row`` makes it: the values Django's converters would
    give. The times come as text (``OneRowStatements.kept``), and are parsed
    into the datetimes the driver would give. The converters the columns
    need here (a datetime made aware in the connection's time zone,
    microseconds made a duration) are applied as they do it, without their
    per-value dispatch, in loops, not calls; any other, as Django does."""

    def __init__(self, tables: LockTables) -> None:
        self.tables = tables
        # The times: the DateTimeFields, and the database's now after them.
        self._times = {
            index
            for index, name in enumerate(tables.attnames)
            if tables.fields[name].get_internal_type() == "DateTimeField"
        } | {len(tables.attnames)}

    @cached_property
    def _plan(self) -> _Plan:
        aware: list[int] = []
        naive = sorted(self._times - set(self.tables.converters))
        durations: list[int] = []
        others: list[tuple[int, Callable[[Any, Any], Any]]] = []
        for index, (functions, expression) in self.tables.converters.items():
            kind = [getattr(function, "__func__", None) for function in functions]
            time = index in self._times
            if time and kind == [DatabaseOperations.convert_datetimefield_value]:
                aware.append(index)
            elif not time and kind == [BaseDatabaseOperations.convert_durationfield_value]:
                durations.append(index)
            else:
                others.append((index, _converted_by(functions, expression, parse=time)))
        return aware, naive, durations, others

    def row(self, values: Sequence[Any], connection: BaseDatabaseWrapper) -> LockRow:
        converted = list(values)
        aware, naive, durations, others = self._plan
        if aware:
            zone = connection.timezone
            for index in aware:
                # Django's make_aware: it refuses an aware datetime, which the text never gives.
                value = converted[index]
                if type(value) is str:  # (_datetime(), without its call)
                    converted[index] = fromisoformat(value).replace(tzinfo=zone)
                elif value is not None:
                    converted[index] = _datetime(value).replace(tzinfo=zone)
        for index in naive:
            value = converted[index]
            if value is not None:
                converted[index] = _datetime(value)
        for index in durations:
            value = converted[index]
            if value is not None:
                converted[index] = timedelta(microseconds=value)
        for index, convert in others:
            converted[index] = convert(converted[index], connection)
        return self.tables.named_row(converted)


def _datetime(text: Any) -> datetime:
    """The naive datetime of a time's text (``_TIME_TEXT``), as the driver's
    converter makes it of a DATETIME's."""
    return datetime.fromisoformat(text if type(text) is str else text.decode())


def _converted_by(
    functions: Sequence[Callable[..., Any]], expression: Any, *, parse: bool
) -> Callable[[Any, BaseDatabaseWrapper], Any]:
    def convert(value: Any, connection: BaseDatabaseWrapper) -> Any:
        if parse and value is not None:
            value = _datetime(value)
        for function in functions:
            value = function(value, expression, connection)
        return value

    return convert
