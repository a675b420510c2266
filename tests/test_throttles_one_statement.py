"""A throttle's use is one statement that counts, decides and records (issue 46),
the rule is the same in SQL and in Python, and eight processes on one key never
see a window hold more than the rate."""

from __future__ import annotations

import random
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.apps import apps
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_dlock import throttle
from django_dlock.backends import backend_for
from django_dlock.models import ThrottleSlot
from django_dlock.rules.throttle import WIDTH, granted, granted_sql, kept, kept_sql, microseconds
from tests import workers_throttles
from tests.throttle_utils import kept as kept_uses
from tests.utils import database_settings, run_in_processes, spawn


@pytest.mark.django_db
def test_each_use_is_one_statement_first_granted_and_refused() -> None:
    limiter = throttle("email:1", rate="2/m")
    for expected in (True, True, False, False):
        with CaptureQueriesContext(connection) as queries:
            assert limiter.try_use().granted is expected
        assert len(queries.captured_queries) == 1, queries.captured_queries


def _dialect() -> object:
    """The dialect of the database under test (each backend's throttles module has one)."""
    module = type(backend_for(connection.alias).throttles).__module__
    names = {"postgresql": "PostgreSQLDialect", "sqlite": "SQLiteDialect", "mysql": "MySQLDialect"}
    vendor_module = __import__(module, fromlist=["_"])
    return getattr(vendor_module, names[connection.vendor])()


@pytest.mark.django_db
def test_the_rule_in_sql_is_the_rule_in_python() -> None:
    """``granted_sql`` and ``kept_sql`` evaluated by the database answer what
    ``granted`` and ``kept`` answer, for rings shorter, as long as and longer
    than the limit, with the deciding time inside, on and outside the window."""
    d = _dialect()
    rng = random.Random(46)
    placeholder, now = "%s", 1_800_000_000_000_000
    cases = []
    for count in (0, 1, 2, 3, 4, 5, 7):
        for limit in (1, 2, 3, 4):
            times = sorted(
                now - rng.choice((0, 10, 59_999_999, 60_000_000, 90_000_000)) for _ in range(count)
            )
            cases.append(("".join(str(t).rjust(WIDTH, "0") for t in times), limit))
    with connection.cursor() as cursor:
        for ring, limit in cases:
            decided = granted_sql(d, placeholder, str(now), limit, 60_000_000)  # type: ignore[arg-type]
            written = kept_sql(d, placeholder, str(now), limit, 60_000_000)  # type: ignore[arg-type]
            sql = f"SELECT {decided}, {written}"
            cursor.execute(sql, [ring] * sql.count(placeholder))
            answer, ring_after = cursor.fetchone()
            assert bool(answer) is granted(ring, now, limit, 60_000_000), (ring, limit)
            assert ring_after == kept(ring, now, limit, 60_000_000), (ring, limit)


@pytest.mark.django_db
def test_the_migration_folds_a_keys_rows_into_its_first() -> None:
    fold = __import__("django_dlock.migrations.0010_throttle_ring", fromlist=["_"]).fold_uses
    base = datetime(2026, 12, 5, 12, tzinfo=UTC)
    for slot, seconds in ((0, 30), (1, 10), (2, 20)):
        at = base + timedelta(seconds=seconds)
        ThrottleSlot.objects.create(
            key="email:1", slot=slot, used_at=at, free_at=at + timedelta(minutes=1), rate="3/m"
        )
    ThrottleSlot.objects.create(key="email:2", slot=0, used_at=base, free_at=base, rate="1/m")

    fold(apps, SimpleNamespace(connection=connection))

    assert kept_uses("email:1") == [base + timedelta(seconds=s) for s in (10, 20, 30)]
    assert kept_uses("email:2") == [base]
    row = ThrottleSlot.objects.get(key="email:1")
    assert (row.slot, row.used_at) == (0, base + timedelta(seconds=30))
    assert ThrottleSlot.objects.count() == 2
    assert row.used_at is not None and microseconds(row.used_at) == int(row.ring[-WIDTH:])


@pytest.mark.django_db(transaction=True)
def test_eight_processes_on_one_key_never_see_a_window_hold_more_than_the_rate() -> None:
    """Eight processes use one key as fast as they can for 1.5 s at 10 uses a
    second: by the database's times of the decisions, any 11 granted uses lie at
    least a second apart, and every refusal came while the last second held 10."""
    limit, period, processes = 10, timedelta(seconds=1), 8
    start = spawn.Barrier(processes)

    results = run_in_processes(
        workers_throttles.hammer,
        [(database_settings(), "mail:eight", f"{limit}/s", 1.5, start)] * processes,
    )

    decisions = sorted((at, granted, retry) for worker in results for granted, at, retry in worker)
    grants = [at for at, granted, _ in decisions if granted]
    refusals = [(at, retry) for at, granted, retry in decisions if not granted]
    assert len(grants) >= limit + 1 and refusals  # the window filled and slid
    for earlier, later in zip(grants, grants[limit:], strict=False):
        assert later - earlier >= period, f"{limit + 1} uses within {later - earlier}"
    for at, retry in refusals:
        in_window = [g for g in grants if at - period < g <= at]
        assert len(in_window) == limit
        assert retry == in_window[0] + period - at


# The throttle's rule written out: a time compared with now less the period
# (the window's edge). rules/throttle.py alone writes it.
WINDOW_EDGE = re.compile(r"now\w*\W?\s*-\s*\W?[\w.]*period")


@pytest.mark.vendor_independent
def test_no_module_but_the_rule_writes_the_window_out() -> None:
    package = Path(__file__).resolve().parent.parent / "django_dlock"
    found = [
        f"{path.relative_to(package)}:{number}"
        for path in sorted(package.rglob("*.py"))
        if path != package / "rules" / "throttle.py" and "migrations" not in path.parts
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if WINDOW_EDGE.search(line.split("#", 1)[0])
    ]
    assert found == []
    assert WINDOW_EDGE.search("window_start = now - rate.period")
    assert WINDOW_EDGE.search('f"WHEN {oldest} <= {now_us} - {period_us} THEN 1"')
