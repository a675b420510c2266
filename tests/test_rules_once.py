"""The predicates of admission are defined once (``django_dlock.rules.predicates``):
their Python, SQL and queryset forms agree on every database, and nothing else
in the package writes them out again."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from django_dlock.backends import backend_for
from django_dlock.backends.results import LockRow
from django_dlock.models import DistributedLock
from django_dlock.rules import SHARED_HOLDERS
from django_dlock.rules.clock import DatabaseNow
from django_dlock.rules.grant import GRANT_MARK, GRANT_PARAMS, revoked, revoked_sql
from django_dlock.rules.predicates import (
    DELAY_RUNS,
    FREE_FOR_OWNER,
    HELD,
    HELD_BY_OWNER,
    HELD_BY_SHARED,
    IS_HEAD,
    MAY_JOIN,
    Term,
    is_head,
    may_join,
)

EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
PACKAGE = Path(__file__).resolve().parent.parent / "django_dlock"
PREDICATES = PACKAGE / "rules" / "predicates.py"

# What each predicate looks like written out: "held now" in SQL and in Python,
# "the lock-delay still runs" (an expiry plus the delay) in either, "may join"
# (no writer ahead; holders and those ahead below the limit) and "is the head"
# (nobody ahead; the first ticket) in either.
COPIES = {
    "held now (SQL)": re.compile(r"owner\W*\s*<>\s*''.*expires_at"),
    "held now (Python)": re.compile(
        r"owner\s*!=\s*\"\"|bool\([\w.]*owner\)\s+and|now\s*<\s*[\w.]*expires_at"
        r"|expires_at\s*>\s*[\w.]*now\b"
    ),
    "the delay runs": re.compile(r"expires_at\W.*\+.*lock_delay|lock_delay\W.*\+.*expires_at"),
    "may join (SQL)": re.compile(
        r"queued\)\s*(>\s*0|<)|<\s*head\.\{?[\w(]*['\"]?limit|SELECT\s+\{between"
    ),
    "may join (Python)": re.compile(
        r"writers\w*\s*==\s*0|ahead_exclusive\s*==\s*0|\+\s*[\w.]*ahead\s*<|holders\s*\+\s*\w"
    ),
    # (the first ticket; the waiter just ahead, ``ORDER BY id DESC``, is another question)
    "is the head (SQL)": re.compile(
        r"(ORDER BY|MIN\()\s*\w*\.?\{?(qn\(['\"])?id\b(?![^,]*DESC)[^,]*(LIMIT 1|\))"
    ),
    "is the head (Python)": re.compile(
        r"ahead\s*==\s*0|\.ahead\s+(and|or)\b|not\s+[\w.]*\.ahead\b"
    ),
}


@pytest.mark.vendor_independent
def test_no_module_writes_a_predicate_out_again() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PREDICATES or "migrations" in path.parts:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]  # a comment may name the rule
            found += [
                f"{path.relative_to(PACKAGE)}:{number}: {name}"
                for name, pattern in COPIES.items()
                if pattern.search(code)
            ]
    assert found == []


@pytest.mark.vendor_independent
def test_the_check_finds_a_copy() -> None:
    copies = [
        "f\"l.{c['owner']} <> '' AND l.{c['expires_at']} > {now}\"",
        'return self.owner != "" and self.now < self.expires_at',
        "f\"{c['expires_at']} + INTERVAL {c['lock_delay']} MICROSECOND > {now_sql}\"",
        "admitted = writers == 0 if limit is None else holders + everyone < limit",
        "admissible = (free or shared) and row.ahead_exclusive == 0",
        "taken + row.ahead < claim.kind.limit",
        '"CASE WHEN %(limit)s IS NULL THEN CASE WHEN (SELECT x FROM queued) > 0 "',
        "f\"WHEN l.{c['hold_count']} + (SELECT n FROM queued) < %(limit)s THEN\"",
        "f\"AND (SELECT COUNT(*) {between('x')}) < head.{qn('limit')} - 1 - ({holders})\"",
        "f\"AND NOT EXISTS (SELECT {between('x')} AND x.{qn('mode')} = '{EXCLUSIVE}')\"",
        "self.admissible = self.free and self.ahead == 0",
        "if state.free and state.ahead and self.ticket is not None:",
        "f\"AND {queue.live_waiter_sql('w.')} {condition} ORDER BY w.{qn('id')} LIMIT 1\"",
        "f\"ELSE 0 END) AS x, MIN(w.{qn('id')}) AS h {self.queued_before_sql(resource, ticket)}\"",
    ]
    assert all(any(p.search(copy) for p in COPIES.values()) for copy in copies)


# Rows in every state the predicates tell apart, relative to the database's now:
# (owner, expires in seconds, lock_delay in seconds, fencing token).
STATES = {
    "held by a": ("a", 30, None, 7),
    "held by a with a delay": ("a", 30, 60, 7),
    "held by b": ("b", 30, None, 7),
    "expired, a's": ("a", -5, None, 7),
    "expired, delay running": ("a", -5, 60, 7),
    "expired, delay over": ("a", -120, 60, 7),
    "force-released, delay running": ("", 0, 60, 7),
    "released": ("", 0, None, 7),
    "shared holders": (SHARED_HOLDERS, 30, None, 7),
    "shared holders, expired": (SHARED_HOLDERS, -5, None, 7),
}
PARAMS = [
    {"owner": "a", "held": None},
    {"owner": "a", "held": 7},
    {"owner": "a", "held": 8},
    {"owner": "b", "held": None},
]
TERMS: dict[str, Term] = {
    "HELD": HELD,
    "HELD_BY_OWNER": HELD_BY_OWNER,
    "HELD_BY_SHARED": HELD_BY_SHARED,
    "DELAY_RUNS": DELAY_RUNS,
    "FREE_FOR_OWNER": FREE_FOR_OWNER,
}


@pytest.fixture
def rows() -> dict[str, int]:
    """A row per state; {state: pk}. Written relative to the database's now."""
    clock = DistributedLock.objects.create(
        resource="clock", owner="", acquired_at=EPOCH, expires_at=EPOCH, fencing_token=1
    )
    annotated = DistributedLock.objects.annotate(db_now=DatabaseNow())
    db_now = annotated.values_list("db_now", flat=True).get(pk=clock.pk)
    clock.delete()
    pks = {}
    for index, (state, (owner, expires, delay, token)) in enumerate(STATES.items()):
        lock = DistributedLock.objects.create(
            resource=f"state:{index}",
            owner=owner,
            acquired_at=db_now - timedelta(seconds=200),
            expires_at=db_now + timedelta(seconds=expires),
            fencing_token=token,
            lock_delay=None if delay is None else timedelta(seconds=delay),
        )
        pks[state] = lock.pk
    return pks


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("params", PARAMS, ids=lambda p: f"owner={p['owner']},held={p['held']}")
def test_python_sql_and_queryset_forms_agree(rows: dict[str, int], params: dict[str, Any]) -> None:
    tables = backend_for("default").tables
    row = tables.sql_row
    # A NULL sent on its own has no type where the server binds (PostgreSQL
    # with server-side binding): the token is cast, as the backends' statements do.
    integer = "SIGNED" if connection.vendor == "mysql" else "BIGINT"
    placeholders = {"owner": "%s", "held": f"CAST(%s AS {integer})"}
    ordered = [params["owner"], params["held"], params["held"]]  # as FREE_FOR_OWNER reads them
    columns = ", ".join(tables.columns)
    for name, term in TERMS.items():
        sql = term.sql(replace(row, placeholders=placeholders))
        used = ordered if term is FREE_FOR_OWNER else [params["owner"]] if "%s" in sql else []
        for state, pk in rows.items():
            with connection.cursor() as cursor:
                cursor.execute(
                    f"SELECT {columns}, {row.now}, CASE WHEN {sql} THEN 1 ELSE 0 END "  # noqa: S608
                    f"FROM {tables.table} WHERE {tables.column_sql['id']} = %s",
                    [*used, pk],
                )
                values = cursor.fetchone()
            lock_row: LockRow = tables.row(values[:-1])
            in_python = bool(term.value(lock_row, params))
            assert (name, state, bool(values[-1])) == (name, state, in_python)
    # The querysets' forms, where they have one, on the same rows.
    for name, term in {"HELD": HELD, "DELAY_RUNS": DELAY_RUNS}.items():
        matched = set(DistributedLock.objects.filter(term.q()).values_list("pk", flat=True))
        for state, pk in rows.items():
            with connection.cursor() as cursor:
                cursor.execute(
                    f"SELECT {columns}, {row.now} FROM {tables.table} "  # noqa: S608
                    f"WHERE {tables.column_sql['id']} = %s",
                    [pk],
                )
                lock_row = tables.row(cursor.fetchone())
            assert (name, state, pk in matched) == (name, state, bool(term.value(lock_row, {})))


# A hand-over's grant (``rules.grant``): (owner, started s ago, expires in s, lock_delay s).
GRANTS = {
    "a grant, young": ("head", 0.2, 0.8, 0),
    "a grant, older than the offer lease": ("head", 5, 25, 0),
    "a hold, young": ("head", 0.2, 30, None),
    "a hold with a delay, young": ("head", 0.2, 30, 60),
    "a revoked grant": ("", 0.2, 0.8, 0),
}


@pytest.mark.django_db(transaction=True)
def test_an_unconfirmed_grant_and_its_revocation_agree_in_python_and_sql() -> None:
    backend = backend_for("default")
    tables, rows = backend.tables, backend.rows
    row = replace(tables.sql_row, placeholders={"grant_mark": "%s", "offer_lease": "%s"})
    lease = rows.duration_value(GRANT_PARAMS["offer_lease"])
    params = [rows.duration_value(GRANT_MARK), lease, lease]  # as revoked_sql reads them
    columns = ", ".join(tables.columns)
    found = {}
    for index, (state, (owner, age, left, delay)) in enumerate(GRANTS.items()):
        clock = DistributedLock.objects.annotate(db_now=DatabaseNow())
        lock = DistributedLock.objects.create(
            resource=f"grant:{index}", owner=owner, acquired_at=EPOCH, expires_at=EPOCH,
            fencing_token=1, lock_delay=None if delay is None else timedelta(seconds=delay),
        )  # fmt: skip
        db_now = clock.values_list("db_now", flat=True).get(pk=lock.pk)
        clock.filter(pk=lock.pk).update(
            acquired_at=db_now - timedelta(seconds=age),
            expires_at=db_now + timedelta(seconds=left),
        )
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT {columns}, {row.now}, {revoked_sql(row)} "  # noqa: S608
                f"FROM {tables.table} WHERE {tables.column_sql['id']} = %s",
                [*params, lock.pk],
            )
            values = cursor.fetchone()
        lock_row: LockRow = tables.row(values[:-1])
        # (Read as a row's now, which converts a timestamp as the database returns it.)
        in_sql = tables.row([*values[: len(tables.columns)], values[-1]]).now
        until = revoked(lock_row)
        assert (state, in_sql) == (state, lock_row.now if until is None else until)
        found[state] = until is not None
    assert found == {state: state == "a grant, young" for state in GRANTS}


# The counts "may join" and "is the head" read, in every combination that tells
# their cases apart: (limit, holders, ahead, writers ahead).
COUNTS: list[dict[str, Any]] = [
    {"limit": limit, "holders": holders, "ahead": ahead, "writers_ahead": writers}
    for limit in (None, 1, 3)
    for holders in (0, 1, 2)
    for ahead in (0, 1, 2)
    for writers in (0, 1)
    if writers <= ahead
]


@pytest.mark.django_db
def test_queue_predicates_agree_in_python_and_sql() -> None:
    integer = "SIGNED" if connection.vendor == "mysql" else "BIGINT"
    row = backend_for("default").tables.sql_row.spelling(
        **{name: f"CAST(%({name})s AS {integer})" for name in COUNTS[0]}
    )
    for name, term in {"MAY_JOIN": MAY_JOIN, "IS_HEAD": IS_HEAD}.items():
        for counts in COUNTS:
            with connection.cursor() as cursor:
                cursor.execute(f"SELECT CASE WHEN {term.sql(row)} THEN 1 ELSE 0 END", counts)
                in_sql = bool(cursor.fetchone()[0])
            in_python = may_join(**counts) if term is MAY_JOIN else is_head(counts["ahead"])
            assert (name, counts, in_sql) == (name, counts, in_python)
    # The decision as the contract words it (docs/locks.md, "Lock kinds").
    assert may_join(None, holders=2, ahead=2, writers_ahead=0)
    assert not may_join(None, holders=2, ahead=2, writers_ahead=1)
    assert may_join(3, holders=1, ahead=1, writers_ahead=1)
    assert not may_join(3, holders=2, ahead=1, writers_ahead=0)
    assert is_head(0) and not is_head(1)
