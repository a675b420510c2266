"""The due times and claims of ``LeaderScheduler``'s runs (``contrib.beat_runs``), and
the scheduler it wraps; tests/test_contrib_beat.py runs real beats."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest

pytest.importorskip("celery")

from celery import Celery
from celery.beat import PersistentScheduler, Scheduler
from celery.schedules import BaseSchedule, crontab, schedule
from django.core.checks import Error
from django.test import override_settings

from django_dlock.checks import check_settings
from django_dlock.contrib.beat import (
    DUE_HEADER,
    LeaderScheduler,
    Leadership,
    wrapped_scheduler_class,
)
from django_dlock.contrib.beat_runs import (
    CLAIM_MARGIN,
    claim_run,
    claim_seconds,
    interval_due,
    latest_due,
    run_resource,
)
from django_dlock.models import DistributedLock
from django_dlock.validators import validate_resource

APP = Celery("beat-runs", set_as_current=False)
NOW = datetime(2026, 12, 5, 10, 17, 42, 750_000, tzinfo=UTC)


_S = TypeVar("_S", bound=BaseSchedule)


def at(now: datetime, sched: _S) -> _S:
    """``sched`` in the app, its clock stopped at ``now``."""
    sched.nowfun = lambda: now  # type: ignore[attr-defined]  # (not in celery-types)
    sched.app = APP
    return sched


def test_an_interval_is_due_on_its_grid_from_the_epoch_whatever_the_entry_state() -> None:
    assert latest_due(at(NOW, schedule(1.0)), NOW) == NOW.replace(microsecond=0)
    assert latest_due(at(NOW, schedule(timedelta(minutes=5))), NOW) == NOW.replace(
        minute=15, second=0, microsecond=0
    )
    half = latest_due(at(NOW, schedule(0.5)), NOW)
    assert half == NOW.replace(microsecond=500_000)


def test_a_leader_a_little_behind_catches_up_and_a_standby_sends_the_latest() -> None:
    every = at(NOW, schedule(1.0))
    on_time = NOW.replace(microsecond=0) - timedelta(seconds=1)
    assert interval_due(every, on_time, NOW) == NOW.replace(microsecond=0)
    behind = NOW.replace(microsecond=0) - timedelta(seconds=3)
    assert interval_due(every, behind, NOW) == behind + timedelta(seconds=1)
    stale = NOW - timedelta(hours=2)  # a standby's own state, hours old
    assert interval_due(every, stale, NOW) == NOW.replace(microsecond=0)


@pytest.mark.parametrize(
    ("cron", "due"),
    [
        (crontab(), NOW.replace(second=0, microsecond=0)),
        (crontab(minute="*/15"), NOW.replace(minute=15, second=0, microsecond=0)),
        (crontab(minute=0, hour=4), NOW.replace(hour=4, minute=0, second=0, microsecond=0)),
        (crontab(minute=0, hour=12), NOW.replace(day=4, hour=12, minute=0, second=0, microsecond=0)),
        (crontab(minute=0, hour=0, day_of_month=1), datetime(2026, 12, 1, tzinfo=UTC)),
        (crontab(minute=0, hour=0, day_of_month=1, month_of_year=1), datetime(2026, 1, 1, tzinfo=UTC)),
    ],
)  # fmt: skip
def test_a_crontab_is_due_at_its_latest_moment(cron: crontab, due: datetime) -> None:
    assert latest_due(at(NOW, cron), NOW) == due


def test_a_claim_lasts_until_the_next_run_and_a_margin_at_most_max_ttl() -> None:
    assert claim_seconds(at(NOW, schedule(1.0)), NOW) == 1.0 + CLAIM_MARGIN
    hourly = at(NOW, crontab(minute=0))
    assert claim_seconds(hourly, NOW.replace(minute=0, second=0, microsecond=0)) == 3600 + 60
    monthly = at(NOW, crontab(minute=0, hour=0, day_of_month=1))
    assert claim_seconds(monthly, datetime(2026, 12, 1, tzinfo=UTC)) == 86400  # DLOCK_MAX_TTL


def test_a_run_resource_is_a_valid_name_for_any_entry_name() -> None:
    due = NOW.replace(microsecond=0)
    assert (
        run_resource("proj", "every second", due)
        == "celery-beat-run:proj:every%20second@20261205T101742Z"
    )
    for name in ["a/b c", "x" * 400, "ü\n", "ab:cd"]:
        resource = run_resource("proj", name, NOW)
        assert validate_resource(resource) == resource
    assert run_resource("p", "x" * 400 + "1", due) != run_resource("p", "x" * 400 + "2", due)
    assert run_resource("p", "e", NOW).endswith("@20261205T101742.75Z")


@pytest.mark.django_db(transaction=True)
def test_a_run_is_claimed_once() -> None:
    every = schedule(1.0, app=APP)
    due = latest_due(every, datetime.now(UTC))
    assert claim_run("proj", "e", every, due, "beat one")
    assert not claim_run("proj", "e", every, due, "beat two")
    assert claim_run("proj", "e", every, due + timedelta(seconds=1), "beat two")
    [hold] = DistributedLock.objects.holders(run_resource("proj", "e", due))
    assert hold.label == "beat one"


@pytest.mark.django_db(transaction=True)
def test_a_run_too_late_for_its_claim_to_stand_is_not_claimed() -> None:
    monthly = crontab(minute=0, hour=0, day_of_month=1, app=APP)
    due = latest_due(monthly, datetime.now(UTC))
    late = (datetime.now(UTC) - due).total_seconds() >= 86400 - CLAIM_MARGIN / 2
    assert claim_run("proj", "monthly", monthly, due, "beat") is not late


def test_the_wrapped_scheduler_is_named_by_a_dotted_path(settings: object) -> None:
    assert wrapped_scheduler_class() is PersistentScheduler
    assert wrapped_scheduler_class("celery.beat.Scheduler") is Scheduler
    with override_settings(DLOCK_BEAT_SCHEDULER="celery.beat:Scheduler"):
        assert wrapped_scheduler_class() is Scheduler
    with pytest.raises(TypeError, match="not a Celery beat Scheduler"):
        wrapped_scheduler_class("celery.schedules:crontab")
    with pytest.raises(ImportError):
        wrapped_scheduler_class("django_celery_beat.schedulers:Missing")


@pytest.mark.parametrize(
    "path", ["celery.beat:Nope", "nope.schedulers:DatabaseScheduler", "", 42, "celery.beat:info"]
)
def test_a_beat_scheduler_that_does_not_import_is_a_check_error(path: object) -> None:
    with override_settings(DLOCK_BEAT_SCHEDULER=path):
        errors = [e for e in check_settings() if e.id == "django_dlock.E702"]
    assert len(errors) == 1 and isinstance(errors[0], Error)
    assert "DLOCK_BEAT_SCHEDULER" in errors[0].msg


def test_a_beat_scheduler_that_imports_is_no_error() -> None:
    for path in ("celery.beat:PersistentScheduler", "celery.beat.Scheduler"):
        with override_settings(DLOCK_BEAT_SCHEDULER=path):
            assert [e for e in check_settings() if e.id == "django_dlock.E702"] == []


def test_a_lazy_leader_scheduler_for_the_banner_stands_for_nothing(tmp_path: Path) -> None:
    """``celery beat`` makes a lazy scheduler for its banner: it must not stand for the lead."""
    app = Celery("proj", set_as_current=False)
    scheduler = LeaderScheduler(
        app, lazy=True, schedule_filename=str(tmp_path / "schedule"), max_interval=7
    )
    assert not scheduler.leadership._thread.is_alive()  # no thread, no queue ticket
    assert scheduler.max_interval == 7  # the wrapped scheduler's
    assert "leader election -> celery-beat:proj (lease 10 s)" in scheduler.info
    assert "wraps -> celery.beat.PersistentScheduler" in scheduler.info
    assert str(tmp_path / "schedule") in scheduler.info


class DatabaseLike(Scheduler):
    """Reserves as django-celery-beat's ``DatabaseScheduler`` does: the next entry is
    returned, not stored in the schedule (its sync saves the row's model)."""

    def reserve(self, entry: Any) -> Any:
        return next(entry)


class Leading(Leadership):
    """Leads from the start, without a lock: two of these in one process both lead."""

    @property
    def leading(self) -> bool:
        return True

    def start(self) -> None:
        pass


class LeadingScheduler(LeaderScheduler):
    leadership_class = Leading


@pytest.mark.django_db(transaction=True)
@override_settings(DLOCK_BEAT_SCHEDULER="tests.test_contrib_beat_runs:DatabaseLike")
def test_two_leading_schedulers_wrapping_another_class_send_each_second_once() -> None:
    app = Celery("in-process", set_as_current=False)
    app.conf.beat_schedule = {"tick": {"task": "in_process.tick", "schedule": 1.0}}
    sent: list[tuple[int, str]] = []
    beats = [LeadingScheduler(app, max_interval=0.2) for _ in range(2)]
    for number, beat in enumerate(beats):
        assert isinstance(beat.scheduler, DatabaseLike)
        beat.scheduler.__dict__["producer"] = None  # (no broker: sends are recorded)

        def record(name: str, *args: Any, number: int = number, **options: Any) -> None:
            sent.append((number, options["headers"][DUE_HEADER]))

        beat.scheduler.send_task = record  # type: ignore[method-assign]
    end = time.monotonic() + 3.2
    while time.monotonic() < end:
        time.sleep(max(min(beat.tick() for beat in beats), 0.01))
    dues = [datetime.fromisoformat(due).timestamp() for _, due in sent]
    assert len(dues) >= 2
    assert dues == list(range(int(dues[0]), int(dues[0]) + len(dues)))  # each second, once
