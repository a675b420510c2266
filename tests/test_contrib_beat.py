"""``LeaderScheduler`` with real ``celery beat`` processes: three of them, each with
its own ``PersistentScheduler`` shelve file, against a real Redis and the test
database; the leader SIGKILLed, then the next one SIGSTOPped (and later resumed).

The beats' app (``tests/workers_beat.py``) has two entries due every second and
records each send with the run's due time (the ``dlock_beat_due`` header).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("celery")
redis = pytest.importorskip("redis")

from django.db import connection  # noqa: E402

from django_dlock import observe_leader  # noqa: E402
from django_dlock.conf import conf  # noqa: E402
from django_dlock.models import DistributedLock  # noqa: E402
from tests.task_processes import Processes, Redis  # noqa: E402
from tests.utils import stop_outside_a_write, wait_for  # noqa: E402

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parent.parent
RESOURCE = "celery-beat:dlock-beat-tests"
ENTRIES = ("every second", "each-second")


class Beats(Processes):
    """``celery beat`` processes by name, each with its own schedule file."""

    def __init__(self, log_dir: Path, database_name: str, broker_url: str) -> None:
        super().__init__(log_dir, database_name)
        self.broker_url = broker_url

    def start(
        self, name: str, scheduler: str = "FastLeader", **env: str
    ) -> subprocess.Popen[bytes]:
        log = self.log_dir / f"{name}.log"
        process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "tests.workers_beat", "beat",
             "-S", f"tests.workers_beat:{scheduler}", f"--schedule={self.log_dir / name}.db",
             "--loglevel=INFO", f"--logfile={log}"],
            cwd=ROOT, env=self.env(CELERY_BROKER_URL=self.broker_url, **env),
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
        )  # fmt: skip
        self.processes[name] = process
        return process


@pytest.fixture
def beats(django_db_setup: None, tmp_path: Path) -> Iterator[Beats]:
    try:
        server = Redis(tmp_path)
    except FileNotFoundError as missing:
        pytest.skip(str(missing))
    started = Beats(tmp_path, connection.settings_dict["NAME"], server.url)
    try:
        yield started
    finally:
        for process in started.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGCONT)
        started.stop_all()
        server.stop()


def leader_pid() -> int | None:
    """The pid in the label of the beats' leader, if one leads."""
    holds = DistributedLock.objects.holders(RESOURCE)
    return int(holds[0].label.rsplit(":", 1)[1]) if holds else None


def sends(beats: Beats) -> list[dict[str, Any]]:
    client = redis.Redis.from_url(beats.broker_url)
    return [json.loads(raw) for raw in client.lrange("sends", 0, -1)]


def wait_sends(beats: Beats, pid: int, seconds: float, what: str) -> None:
    """Wait until ``pid`` sent runs ``seconds`` from now (or later)."""
    after = time.time() + seconds
    wait_for(lambda: any(s["pid"] == pid and s["at"] > after for s in sends(beats)), 30, what)


def test_three_beats_send_each_due_run_once_across_a_kill_and_a_stop(beats: Beats) -> None:
    from tests.workers_beat import LEASE

    # How late a standby takes over (docs/celery.md): the lease, a poll of the lock
    # (DLOCK_BACKOFF_MAX) and a standby's wait for the lead; a run due a moment
    # before the stop may not have been sent yet either (nor ever, one that the leader
    # stopped with SIGTERM had claimed: its SystemExit came before the send).
    window = LEASE + conf.BACKOFF_MAX + 1.0
    processes = {beats.start(name).pid: name for name in ("b1", "b2", "b3")}
    first = wait_for(leader_pid, 60, "a beat to lead")
    assert first in processes
    [hold] = DistributedLock.objects.holders(RESOURCE)
    assert hold.label.startswith("celery beat on ") and hold.label.endswith(f":{first}")
    observed = next(observe_leader(RESOURCE))  # a leader like any other
    assert observed is not None and observed.label == hold.label
    wait_sends(beats, first, 2.5, "the leader to send")

    killed_at = time.time()
    os.kill(first, signal.SIGKILL)
    second = wait_for(lambda: (pid := leader_pid()) != first and pid, 30, "a new leader")
    wait_sends(beats, second, 2.5, "the new leader to send")

    stopped_at = time.time()
    stop_outside_a_write(second)  # a process paused in a write stops every other
    third = wait_for(lambda: (pid := leader_pid()) not in (first, second) and pid, 30, "a third")
    wait_sends(beats, third, 2.0, "the third leader to send")
    os.kill(second, signal.SIGCONT)  # it resumes mid-tick, believing it leads
    resumed_at = time.time()
    time.sleep(3.0)
    assert leader_pid() == third
    # A leader stopped with SIGTERM gives the lead up: the standby takes it at once.
    terminated_at = time.time()
    os.kill(third, signal.SIGTERM)
    beats.processes[processes[third]].wait(timeout=30)
    # Renewed every third of LEASE, its hold would outlive its exit had it not been
    # released (timed from the exit, so a slow shutdown under load proves nothing false).
    assert leader_pid() != third, beats.log(processes[third])[-3000:]
    wait_for(lambda: leader_pid() == second, 30, "the resumed beat to lead")
    beats.stop_all()

    recorded = sends(beats)
    stops = {"killed": killed_at, "stopped": stopped_at, "terminated": terminated_at}
    events = {**stops, "resumed": resumed_at}
    for entry in ENTRIES:
        runs = [send for send in recorded if send["entry"] == entry]
        dues = Counter(send["due"] for send in runs)
        assert [due for due, count in dues.items() if count > 1] == [], f"{entry} sent twice"
        seconds = sorted(datetime.fromisoformat(due).timestamp() for due in dues)
        assert all(second == int(second) for second in seconds), "due times are whole seconds"
        missing = [
            moment
            for moment in range(int(seconds[0]), int(seconds[-1]))
            if moment not in seconds
            and not any(stop - 1 <= moment <= stop + window for stop in stops.values())
        ]
        assert missing == [], f"{entry}: runs missing outside the failover windows {events}"
        for send in runs:  # sent at its due time, but for the takeovers' catch-up runs
            late = send["at"] - datetime.fromisoformat(send["due"]).timestamp()
            # A send the stopped leader had claimed (and checked its lead for) before
            # SIGSTOP goes out as it resumes: once, but as late as the stop lasted.
            in_flight = send["pid"] == second and stopped_at <= send["at"] <= resumed_at + 1.0
            assert 0 <= late < window or (in_flight and late < resumed_at - stopped_at + 2.0), send
    pids = {send["pid"] for send in recorded}
    assert {first, second, third} <= pids
    # The resumed beat stopped leading by its own clock: nothing from it after a lease.
    assert not [
        send
        for send in recorded
        if send["pid"] == second and resumed_at + LEASE < send["at"] < terminated_at
    ]
    assert [send["due"] for send in recorded if send["at"] > resumed_at + LEASE]


@pytest.mark.parametrize("where", ["claim", "send"])
def test_a_beat_exits_on_sigterm_whose_exit_was_raised_inside_sqlite(
    beats: Beats, where: str
) -> None:
    """Beat's SIGTERM handler raises ``SystemExit`` wherever the signal finds the main
    thread; inside a Python function that SQLite calls (on SQLite, Django's, in a
    claim's statement) sqlite3 drops it ("user-defined function raised exception").
    The beat exits all the same, and gives the lead up."""
    if where == "claim" and connection.vendor != "sqlite":
        pytest.skip("a claim calls a Python function on SQLite only")
    beat = beats.start("b1", DLOCK_BEAT_WAIT_IN_SQL=where)
    wait_for(lambda: "waiting in an SQL function" in beats.log("b1"), 30, f"a {where}")
    assert leader_pid() == beat.pid
    beat.send_signal(signal.SIGTERM)
    beat.wait(timeout=30)  # it stood by for ever, with its lead given up
    log = beats.log("b1")
    assert "user-defined function raised exception" in log
    # Given up as it exited, not lost: its handler did not wait for the release
    # inside the claim's statement, which holds SQLite's write lock.
    assert "without a renewal" not in log
    assert leader_pid() is None


def test_the_claims_alone_send_each_run_once_when_every_beat_leads(beats: Beats) -> None:
    """Three beats that each believe they lead (as a leader paused past its lease and
    resumed does, for a moment): every run due while they tick is sent, once."""
    names = ("b1", "b2", "b3")
    for name in names:
        beats.start(name, "EveryoneLeads")
    wait_for(lambda: all("Starting..." in beats.log(name) for name in names), 30, "the beats")
    time.sleep(3.0)
    beats.stop_all()
    assert "was sent already" in beats.logs()  # they raced for the runs
    recorded = sends(beats)
    for entry in ENTRIES:
        dues = Counter(send["due"] for send in recorded if send["entry"] == entry)
        assert [due for due, count in dues.items() if count > 1] == [], f"{entry} sent twice"
        seconds = sorted(datetime.fromisoformat(due).timestamp() for due in dues)
        assert seconds == list(range(int(seconds[0]), int(seconds[-1]) + 1))
