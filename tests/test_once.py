"""``once_per()``: a body runs at most once per window, whichever process or
host comes first, decided by the database's clock."""

from __future__ import annotations

import shutil
import time
from datetime import datetime, timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connection, connections

from django_dlock import InvalidArgument, once_per
from django_dlock.exceptions import LockHeldByCaller
from django_dlock.models import DistributedLock
from tests.docs_utils import run_example
from tests.utils import database_settings
from tests.workers_once import run_workers

pytestmark = pytest.mark.django_db(transaction=True)

Locks = DistributedLock.objects
EVERY = 1.0
# SQLite's clock (and so its acquired_at) counts milliseconds.
TICK = timedelta(milliseconds=1)


def test_processes_with_skewed_clocks_run_the_body_at_most_once_per_window() -> None:
    """Processes call ``once_per("report", every=1 s)`` every 50 ms for 3.5 s; on
    PostgreSQL and MariaDB one of them with its clock an hour behind. The runs
    (the database's time of each) are at least ``every`` apart, and not much
    more: the window ends on time."""
    config = {"db": database_settings(), "resource": "once:report", "every": EVERY, "seconds": 3.5}
    # SQLite's clock is each process's own: a faked one would fake the database's.
    skewed = connection.vendor != "sqlite" and shutil.which("faketime") is not None
    workers: list[tuple[list[str], dict[str, Any]]] = [([], config)] * 2
    workers.append((["faketime", "-f", "-1h"] if skewed else [], config))

    seen = run_workers("once", workers)

    runs = sorted(datetime.fromisoformat(run) for worker in seen for run in worker["runs"])
    assert len(runs) >= 2
    for before, after in zip(runs, runs[1:], strict=False):
        assert after - before >= timedelta(seconds=EVERY) - TICK, (before, after)
        assert after - before < timedelta(seconds=EVERY + 1.5), (before, after)
    if skewed:
        assert abs(seen[-1]["wall_clock"] - time.time() + 3600) < 60  # an hour behind


def test_the_body_runs_when_due_and_is_skipped_until_the_window_ends() -> None:
    with once_per("once:w", every=0.5) as due:
        assert due
    with once_per("once:w", every=0.5) as due:
        assert not due
    time.sleep(0.6)
    with once_per("once:w", every=0.5) as due:
        assert due


def test_a_body_that_raises_uses_its_window() -> None:
    with pytest.raises(RuntimeError), once_per("once:raises", every=timedelta(minutes=1)):
        raise RuntimeError("the report failed")

    with once_per("once:raises", every=timedelta(minutes=1)) as due:
        assert not due


def test_a_body_that_outlasts_the_window_frees_it_when_it_ends() -> None:
    with once_per("once:slow", every=0.1) as due:
        assert due
        time.sleep(0.2)

    assert not Locks.active().filter(resource="once:slow").exists()


def test_the_decorator_calls_the_function_when_due_and_else_returns_none() -> None:
    calls: list[str] = []

    @once_per("once:report:{day}", every=60)
    def report(day: str) -> str:
        calls.append(day)
        return f"report of {day}"

    assert report("mon") == "report of mon"
    assert report("mon") is None
    assert report("tue") == "report of tue"  # a window per name
    assert calls == ["mon", "tue"]


@pytest.mark.asyncio
async def test_async_once_per_and_its_decorator() -> None:
    @once_per("once:async-job", every=60)
    async def job() -> int:
        return 1

    try:
        async with once_per("once:async", every=60) as due:
            assert due
        async with once_per("once:async", every=60) as due:
            assert not due
        assert await job() == 1
        assert await job() is None
    finally:
        await sync_to_async(connections.close_all)()


def test_nested_in_itself_it_raises_rather_than_skip() -> None:
    with once_per("once:nested", every=60), pytest.raises(LockHeldByCaller):  # noqa: SIM117
        with once_per("once:nested", every=60):
            pass


@pytest.mark.parametrize("every", [None, 0, -1, "1 day", 86401, timedelta(days=2)])
def test_an_invalid_every_is_refused(every: Any) -> None:
    with pytest.raises(InvalidArgument, match="every must be"):
        once_per("once:invalid", every=every)


# -- the docs' examples ---------------------------------------------------------------------------


def test_usage_example_runs_the_digest_and_warms_each_site_once() -> None:
    mailed: list[int] = []
    namespace = run_example(
        "once per", mail_the_digest=lambda: mailed.append(1), fill_the_cache=lambda site: 3
    )
    namespace["send_digest"]()
    namespace["send_digest"]()
    assert mailed == [1]
    assert namespace["warm_cache"]("a") == 3
    assert namespace["warm_cache"]("a") is None
    assert namespace["warm_cache"]("b") == 3


def test_daily_report_recipe_sends_it_once_whichever_host_comes() -> None:
    sent: list[int] = []
    daily_report = run_example("daily report", send_daily_report=lambda: sent.append(1))[
        "daily_report"
    ]
    assert daily_report() is True
    assert daily_report() is False  # another host, later the same day
    assert sent == [1]
    [holder] = Locks.holders("report:daily")
    assert holder.label == "daily report"
