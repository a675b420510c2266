"""The predicates of admission, each defined once: "held now", "held by this
owner", "held by shared holders", "the lock-delay still runs", "free for
this owner's exclusive claim", "may join as a reader, or as a permit" and "is
the head of the queue".

A predicate is a small expression tree over the columns of a resource's row
(``distributed_locks``), the database's now and the claim's parameters. The
same tree is evaluated in Python on a ``LockRow`` (the portable operations,
which decide between a ``SELECT ... FOR UPDATE`` and the write), rendered as
SQL for a vendor's one-statement operations (``sql``: the vendor supplies the
clock and its spelling of a timestamp plus a duration, ``SqlRow``), and
compiled by Django for the querysets (``q``), the way Django compiles one
``Expression`` for each vendor. Nothing else in the package writes these
conditions out (``tests/test_rules_once.py`` looks).

The trees are written so that no comparison meets a NULL unguarded (the
lock-delay is tested ``IS NOT NULL`` before it is added, a re-entry's token
only where one was given), so SQL's three-valued logic and Python's two
agree.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import DateTimeField, ExpressionWrapper, F, Q, Value
from django.db.models.lookups import Exact, GreaterThan, IsNull

from django_dlock.rules.clock import DatabaseNow
from django_dlock.validators import RESERVED_OWNER

__all__ = [
    "DELAY_END",
    "DELAY_RUNS",
    "FREE_FOR_OWNER",
    "HELD",
    "HELD_BY_OWNER",
    "HELD_BY_SHARED",
    "IS_HEAD",
    "MAY_JOIN",
    "SqlRow",
    "Term",
    "delay_end",
    "first_in_line",
    "head_ticket",
    "is_head",
    "may_join",
]


@dataclass(frozen=True)
class SqlRow:
    """Where a predicate's SQL reads its row: the quoted column of each
    attname, a table alias with its dot (``"l."``, or ``""``), the SQL of the
    database's now, the vendor's spelling of a timestamp plus a duration column,
    and the placeholder of each parameter (``%(name)s`` unless named here)."""

    columns: Mapping[str, str]
    now: str
    plus: Callable[[str, str], str]
    alias: str = ""
    placeholders: Mapping[str, str] = field(default_factory=dict)

    def aliased(self, alias: str) -> SqlRow:
        """The same row under another alias (``"l."``, ``"locked."``, ``"table."``)."""
        return SqlRow(self.columns, self.now, self.plus, alias, self.placeholders)

    def spelling(self, **values: str) -> SqlRow:
        """The same row, with ``values`` (name: SQL) spelling those parameters."""
        return SqlRow(self.columns, self.now, self.plus, self.alias, values)


class Term:
    """A node of a predicate: ``sql`` renders it, ``value`` evaluates it on a row
    (an object with the row's attributes and ``now``), ``expression`` compiles
    it for a queryset."""

    def sql(self, row: SqlRow) -> str:
        raise NotImplementedError

    def value(self, row: Any, params: Mapping[str, Any]) -> Any:
        raise NotImplementedError

    def expression(self) -> Any:
        raise NotImplementedError

    def q(self) -> Q:
        """The predicate as a queryset filter on the database's clock."""
        return Q(self.expression())


@dataclass(frozen=True)
class Column(Term):
    name: str

    def sql(self, row: SqlRow) -> str:
        return f"{row.alias}{row.columns[self.name]}"

    def value(self, row: Any, params: Mapping[str, Any]) -> Any:
        return getattr(row, self.name)

    def expression(self) -> Any:
        return F(self.name)


@dataclass(frozen=True)
class Now(Term):
    def sql(self, row: SqlRow) -> str:
        return row.now

    def value(self, row: Any, params: Mapping[str, Any]) -> Any:
        return row.now

    def expression(self) -> Any:
        return DatabaseNow()


@dataclass(frozen=True)
class Literal(Term):
    text: str | int

    def sql(self, row: SqlRow) -> str:
        # A constant of the package's own (no quote, no percent sign in it).
        text = self.text
        return str(text) if isinstance(text, int) else "'{}'".format(text.replace("'", "''"))

    def value(self, row: Any, params: Mapping[str, Any]) -> Any:
        return self.text

    def expression(self) -> Any:
        return Value(self.text)


@dataclass(frozen=True)
class Param(Term):
    """A value of the claim's, sent as a parameter."""

    name: str

    def sql(self, row: SqlRow) -> str:
        return row.placeholders.get(self.name, f"%({self.name})s")

    def value(self, row: Any, params: Mapping[str, Any]) -> Any:
        return params[self.name]


@dataclass(frozen=True)
class Plus(Term):
    """A timestamp plus a duration (None if either is)."""

    at: Term
    duration: Term

    def sql(self, row: SqlRow) -> str:
        return row.plus(self.at.sql(row), self.duration.sql(row))

    def value(self, row: Any, params: Mapping[str, Any]) -> Any:
        at, duration = self.at.value(row, params), self.duration.value(row, params)
        return None if at is None or duration is None else at + duration

    def expression(self) -> Any:
        # Django spells it for each database (an interval, microseconds, text).
        return ExpressionWrapper(
            self.at.expression() + self.duration.expression(), output_field=DateTimeField()
        )


@dataclass(frozen=True)
class Sum(Term):
    left: Term
    right: Term

    def sql(self, row: SqlRow) -> str:
        return f"({self.left.sql(row)} + {self.right.sql(row)})"

    def value(self, row: Any, params: Mapping[str, Any]) -> Any:
        left, right = self.left.value(row, params), self.right.value(row, params)
        return None if left is None or right is None else left + right


@dataclass(frozen=True)
class Compare(Term):
    left: Term
    operator: str  # "=", "<>", ">" or "<"
    right: Term

    def sql(self, row: SqlRow) -> str:
        return f"{self.left.sql(row)} {self.operator} {self.right.sql(row)}"

    def value(self, row: Any, params: Mapping[str, Any]) -> bool:
        left, right = self.left.value(row, params), self.right.value(row, params)
        if left is None or right is None:  # SQL: unknown, which no WHERE admits
            return False
        if self.operator == "=":
            return bool(left == right)
        if self.operator == "<>":
            return bool(left != right)
        return bool(left > right) if self.operator == ">" else bool(left < right)

    def q(self) -> Q:
        left, right = self.left.expression(), self.right.expression()
        if self.operator == ">":
            return Q(GreaterThan(left, right))
        equal = Q(Exact(left, right))
        return equal if self.operator == "=" else ~equal


@dataclass(frozen=True)
class IsNotNull(Term):
    term: Term

    def sql(self, row: SqlRow) -> str:
        return f"{self.term.sql(row)} IS NOT NULL"

    def value(self, row: Any, params: Mapping[str, Any]) -> bool:
        return self.term.value(row, params) is not None

    def q(self) -> Q:
        return Q(IsNull(self.term.expression(), False))


@dataclass(frozen=True)
class IsNullParam(Term):
    """A parameter that was not given (SQL: ``%(name)s IS NULL``)."""

    param: Param

    def sql(self, row: SqlRow) -> str:
        return f"{self.param.sql(row)} IS NULL"

    def value(self, row: Any, params: Mapping[str, Any]) -> bool:
        return self.param.value(row, params) is None


@dataclass(frozen=True)
class Not(Term):
    term: Term

    def sql(self, row: SqlRow) -> str:
        return f"NOT ({self.term.sql(row)})"

    def value(self, row: Any, params: Mapping[str, Any]) -> bool:
        return not self.term.value(row, params)

    def q(self) -> Q:
        return ~self.term.q()


@dataclass(frozen=True)
class All(Term):
    """Every one of ``terms`` (SQL ``AND``)."""

    terms: tuple[Term, ...]

    def sql(self, row: SqlRow) -> str:
        return "(" + " AND ".join(term.sql(row) for term in self.terms) + ")"

    def value(self, row: Any, params: Mapping[str, Any]) -> bool:
        return all(term.value(row, params) for term in self.terms)

    def q(self) -> Q:
        combined = Q()
        for term in self.terms:
            combined &= term.q()
        return combined


@dataclass(frozen=True)
class Any_(Term):
    """One of ``terms`` at least (SQL ``OR``)."""

    terms: tuple[Term, ...]

    def sql(self, row: SqlRow) -> str:
        return "(" + " OR ".join(term.sql(row) for term in self.terms) + ")"

    def value(self, row: Any, params: Mapping[str, Any]) -> bool:
        return any(term.value(row, params) for term in self.terms)


def _all(*terms: Term) -> All:
    return All(terms)


OWNER, EXPIRES_AT = Column("owner"), Column("expires_at")
FENCING_TOKEN, LOCK_DELAY = Column("fencing_token"), Column("lock_delay")
NOW = Now()

#: Held now: a holder (not released) whose lease has not run out.
HELD = _all(Compare(OWNER, "<>", Literal("")), Compare(EXPIRES_AT, ">", NOW))

#: Held now by the claim's owner (the parameter ``owner``).
HELD_BY_OWNER = _all(HELD, Compare(OWNER, "=", Param("owner")))

#: Held now by shared holds (readers, or a semaphore's permits), whose rows
#: are in ``distributed_lock_holds``.
HELD_BY_SHARED = _all(HELD, Compare(OWNER, "=", Literal(RESERVED_OWNER)))

#: When the lock-delay kept after an involuntary loss ends (None without one).
DELAY_END = Plus(EXPIRES_AT, LOCK_DELAY)

#: The lock-delay still runs: the holder lost the lock (its lease ran out, or
#: an operator force-released it) less than its lock-delay ago. A release by
#: the holder clears the delay.
DELAY_RUNS = _all(IsNotNull(LOCK_DELAY), Not(HELD), Compare(DELAY_END, ">", NOW))

#: Free for the claim's owner (``owner``) as the exclusive holder: nobody else
#: holds it, a re-entry (``held``: the fencing token of the grant it means)
#: finds that grant still held, and no lock-delay runs. (Whether anyone is
#: queued ahead is the queue's to say.)
FREE_FOR_OWNER = _all(
    Not(_all(HELD, Compare(OWNER, "<>", Param("owner")))),
    Any_(
        (
            IsNullParam(Param("held")),
            _all(HELD, Compare(FENCING_TOKEN, "=", Param("held"))),
        )
    ),
    Not(DELAY_RUNS),
)


#: What admission reads beside the row (a statement spells each: ``SqlRow.spelling``):
#: the live waiters queued before the claim's ticket, those of them that want
#: the lock exclusively, the valid shared holds, the claim's ``limit`` (None: a reader).
AHEAD, WRITERS_AHEAD = Param("ahead"), Param("writers_ahead")
HOLDERS, LIMIT = Param("holders"), Param("limit")

#: Is the head of the queue: no live waiter is queued before its ticket. A
#: statement that selects the head keeps the first live waiter in ticket order
#: (``first_in_line``, ``head_ticket``): the one of which this holds.
IS_HEAD = Compare(AHEAD, "=", Literal(0))

#: May join the holders: a reader (no ``limit``) while no writer is queued
#: ahead (so readers cannot starve a writer); a permit while the holders and
#: those queued ahead leave one of ``limit``. (That no exclusive holder holds
#: it, and the shared holds are of the claim's kind, the decision says first.)
MAY_JOIN = Any_(
    (
        _all(IsNullParam(LIMIT), Compare(WRITERS_AHEAD, "=", Literal(0))),
        _all(Not(IsNullParam(LIMIT)), Compare(Sum(HOLDERS, AHEAD), "<", LIMIT)),
    )
)


def first_in_line(ticket: str) -> str:
    """SQL: keep the head (``IS_HEAD``) of the live waiters read, whose ticket is ``ticket``."""
    return f"ORDER BY {ticket} LIMIT 1"


def head_ticket(ticket: str) -> str:
    """SQL: the head's ticket (``IS_HEAD``) of the live waiters read, whose ticket is ``ticket``."""
    return f"MIN({ticket})"


def is_head(ahead: int) -> bool:
    """``IS_HEAD`` of a waiter that saw ``ahead`` live waiters before its ticket."""
    return bool(IS_HEAD.value(None, {"ahead": ahead}))


def may_join(limit: int | None, *, holders: int, ahead: int, writers_ahead: int) -> bool:
    """``MAY_JOIN`` for a reader (``limit`` None) or a permit of ``limit``."""
    params = {"limit": limit, "holders": holders, "ahead": ahead, "writers_ahead": writers_ahead}
    return bool(MAY_JOIN.value(None, params))


def delay_end(row: Any) -> datetime | None:
    """When the lock-delay of ``row`` (a ``LockRow``, or a waiter's look at the
    resource) ends, if it still runs at the row's ``now`` (``DELAY_RUNS``);
    else None (held, free, or no delay)."""
    if not DELAY_RUNS.value(row, {}):
        return None
    ends: datetime = DELAY_END.value(row, {})
    return ends
