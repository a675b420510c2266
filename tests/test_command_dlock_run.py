"""``manage.py dlock run`` with real processes: each run is a ``manage.py``
process of its own (``tests.dlock_manage``) against the test database, and CMD
is a real shell with real children."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from django_dlock.models import DistributedLock
from tests.utils import database_settings, make_lock, wait_for

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.django_db(transaction=True)


class Run:
    """A ``manage.py dlock run ...`` process; its stderr lines are read as they
    come, each with the monotonic time it arrived."""

    def __init__(self, *args: str) -> None:
        env = {**os.environ, "DLOCK_TEST_DATABASE": json.dumps(database_settings())}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.dlock_manage", "dlock", "run", *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # a terminal's Ctrl-C reaches the test only
        )
        self.lines: list[tuple[float, str]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append((time.monotonic(), line.rstrip("\n")))

    def wait(self, timeout: float = 60) -> int:
        try:
            returncode = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            # Where it hangs: its threads' stacks (faulthandler, tests.dlock_manage).
            self.process.send_signal(signal.SIGUSR1)
            time.sleep(1)
            raise AssertionError(
                f"dlock run did not end within {timeout} s; its stderr and stacks:\n{self.stderr}"
            ) from None
        self._reader.join(timeout)
        return returncode

    @property
    def stderr(self) -> str:
        return "\n".join(line for _, line in self.lines)

    def line_time(self, text: str) -> float | None:
        """When the first stderr line containing ``text`` arrived."""
        return next((at for at, line in self.lines if text in line), None)

    def stop(self) -> None:
        """SIGTERM (which dlock forwards to CMD before it releases), then SIGKILL."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.wait(timeout=10)


@pytest.fixture
def runs() -> Iterator[list[Run]]:
    """The runs a test starts: whatever is left of them is killed at its end."""
    started: list[Run] = []
    yield started
    for run in started:
        run.stop()


@pytest.fixture
def start(runs: list[Run]) -> Any:
    def start(*args: str) -> Run:
        run = Run(*args)
        runs.append(run)
        return run

    return start


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (an unreaped zombie has ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):  # (gone between the open and the read)
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def pid_in(path: Path) -> int:
    return int(wait_for(lambda: path.exists() and path.read_text().strip(), what=str(path)))


def held(resource: str) -> bool:
    return DistributedLock.objects.active().filter(resource=resource).exists()


def test_exit_status_passes_through_and_cmd_gets_resource_token_and_label(
    start: Any, tmp_path: Path
) -> None:
    env, shown = tmp_path / "env", tmp_path / "shown"
    script = f"env > {env}; python -m tests.dlock_manage dlock show job:env --show-owners > {shown}; exit 7"
    run = start("job:env", "--label", "web-3 pid 4121", "--", "sh", "-c", script)

    assert run.wait() == 7
    assert run.stderr == ""  # CMD's status is passed through without a message
    variables = dict(line.split("=", 1) for line in env.read_text().splitlines() if "=" in line)
    assert variables["DLOCK_RESOURCE"] == "job:env"
    assert variables["DLOCK_LABEL"] == "web-3 pid 4121"
    details = shown.read_text()
    assert f"fencing token {variables['DLOCK_FENCING_TOKEN']}," in details
    owner = details.split("owner ")[1].split()[0]
    assert owner not in env.read_text()  # never the owner
    assert not held("job:env")  # released once CMD ended


def test_the_default_label_names_host_and_pid(start: Any, tmp_path: Path) -> None:
    out = tmp_path / "label"
    run = start("job:label", "--", "sh", "-c", f'echo "$DLOCK_LABEL" > {out}')

    assert run.wait() == 0
    label = out.read_text().strip()
    assert label == f"{os.uname().nodename} pid {run.process.pid}"


def test_a_signal_that_ends_cmd_is_128_plus_its_number(start: Any) -> None:
    assert start("job:sig", "--", "sh", "-c", "kill -KILL $$").wait() == 128 + signal.SIGKILL


def test_a_missing_command_is_127(start: Any) -> None:
    run = start("job:missing", "--", "no-such-command-dlock")

    assert run.wait() == 127
    assert run.stderr == "CommandError: no-such-command-dlock: command not found."
    assert not held("job:missing")


def test_held_by_another_exits_with_the_conflict_code_without_running_cmd(
    start: Any, tmp_path: Path
) -> None:
    make_lock("job:held", "someone-else")
    ran = tmp_path / "ran"

    run = start("job:held", "--", "touch", str(ran))
    assert run.wait() == 75
    assert run.stderr == "CommandError: The lock on 'job:held' is held by another owner."

    assert start("job:held", "--conflict-exit-code", "0", "--", "touch", str(ran)).wait() == 0

    began = time.monotonic()
    waited = start("job:held", "--wait", "1", "--conflict-exit-code", "9", "--", "touch", str(ran))
    assert waited.wait() == 9
    assert time.monotonic() - began >= 1
    assert "Could not acquire the lock on 'job:held' within 1 s" in waited.stderr
    assert not ran.exists()


def test_a_lost_lease_stops_the_whole_process_group_at_once(start: Any, tmp_path: Path) -> None:
    """An operator force-releases the lock: the next renewal finds it lost, and
    within a second CMD, its child and its grandchild are gone."""
    child, grandchild = tmp_path / "child", tmp_path / "grandchild"
    # sh runs a second sh, which starts a sleep in the background and waits for it.
    script = f"echo $$ > {child}; sh -c 'sleep 300 & echo $! > {grandchild}; wait'"
    run = start("job:lost", "--ttl", "1.5", "--", "sh", "-c", script)
    pids = [pid_in(child), pid_in(grandchild)]
    assert all(alive(pid) for pid in pids)

    released_at = time.monotonic()
    assert DistributedLock.objects.force_release("job:lost")
    wait_for(lambda: not any(alive(pid) for pid in pids), seconds=5, what="the group to end")
    gone_at = time.monotonic()

    assert run.wait() == 1
    lost_at = run.line_time("Lost the lock on 'job:lost'")
    assert lost_at is not None, run.stderr
    # Renewals come every ttl/3 = 0.5 s; the group is gone within 1 s of the one
    # that found the lock lost.
    assert lost_at - released_at < 0.5 + 0.5
    assert gone_at - lost_at < 1.0
    assert run.stderr.splitlines()[-1] == (
        "CommandError: Lost the lock on 'job:lost' (it was released or purged): "
        "the command was stopped."
    )


def test_sigterm_is_forwarded_and_the_lock_released_after_cmd_ends(
    start: Any, tmp_path: Path
) -> None:
    ready, got = tmp_path / "ready", tmp_path / "got"
    script = (
        f"trap 'echo TERM > {got}; sleep 1; exit 5' TERM; touch {ready}; "
        "while :; do sleep 0.05; done"
    )
    run = start("job:term", "--", "sh", "-c", script)
    wait_for(ready.exists, what="CMD to start")
    assert held("job:term")

    run.process.send_signal(signal.SIGTERM)
    wait_for(got.exists, what="CMD to get SIGTERM")
    assert held("job:term")  # CMD is still cleaning up: the lock stays held

    assert run.wait() == 5
    assert not held("job:term")


def test_sigint_too(start: Any, tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    # exec: dash catches SIGINT while it waits for a child, and a SIGINT that came
    # between its fork of sleep and the exec ran dash's handler in the child, and
    # was gone: sleep ran on (CI, under load). A terminal's Ctrl-C would race alike.
    run = start("job:int", "--", "sh", "-c", f"touch {ready}; exec sleep 300")
    wait_for(ready.exists, what="CMD to start")

    run.process.send_signal(signal.SIGINT)

    assert run.wait() == 128 + signal.SIGINT
    assert not held("job:int")


def test_processes_cmd_leaves_in_its_group_are_stopped_before_the_release(
    start: Any, tmp_path: Path
) -> None:
    left = tmp_path / "left"
    run = start("job:left", "--", "sh", "-c", f"sleep 300 & echo $! > {left}")

    assert run.wait() == 0
    assert not alive(pid_in(left))
    assert "left processes in its process group" in run.stderr
    assert not held("job:left")


def test_min_hold_keeps_the_lock_after_a_quick_cmd(start: Any) -> None:
    began = time.monotonic()
    run = start("job:cron", "--min-hold", "3", "--", "true")
    wait_for(lambda: held("job:cron"), what="the lock")

    assert start("job:cron", "--", "true").wait() == 75  # a skewed host's run, meanwhile
    assert run.wait() == 0
    assert time.monotonic() - began >= 3
    assert not held("job:cron")


def test_lock_delay_keeps_a_force_released_lock_from_the_next_run(
    start: Any, tmp_path: Path
) -> None:
    ready = tmp_path / "ready"
    run = start(
        "job:delay",
        "--lock-delay",
        "30",
        "--ttl",
        "1.5",
        "--",
        "sh",
        "-c",
        f"touch {ready}; sleep 300",
    )
    wait_for(ready.exists, what="CMD to start")
    lock = DistributedLock.objects.get(resource="job:delay")
    assert lock.lock_delay == timedelta(seconds=30)

    assert DistributedLock.objects.force_release("job:delay")
    assert run.wait() == 1  # lost: CMD stopped

    # Nobody takes it while the delay runs.
    assert start("job:delay", "--", "true").wait() == 75
    assert DistributedLock.objects.available_in("job:delay") is not None


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_wait_keeps_one_of_three_running_and_the_next_takes_over_a_killed_one(
    start: Any, runs: list[Run], tmp_path: Path
) -> None:
    """Three hosts run ``dlock run NAME --wait``: one CMD runs, the others stand
    by. The active host dies (its dlock and its CMD killed with SIGKILL): the
    next CMD starts within ttl + 1 s, and the third still stands by."""
    ttl = 2.0
    log = tmp_path / "starts"
    script = f"echo $$ >> {log}; exec sleep 300"
    for _ in range(3):
        start("job:leader", "--wait", "--ttl", str(ttl), "--", "sh", "-c", script)

    def starts() -> list[int]:
        return [int(pid) for pid in log.read_text().split()] if log.exists() else []

    [first] = wait_for(starts, seconds=30, what="the first CMD")
    time.sleep(1.5 * ttl)  # longer than a ttl: the others keep standing by, renewed
    assert starts() == [first]

    [active] = [run for run in runs if run.process.pid == parent_of(first)]
    killed_at = time.monotonic()
    active.process.kill()
    os.killpg(first, signal.SIGKILL)  # a lost host takes its CMD along

    second = wait_for(lambda: starts()[1:], seconds=2 * ttl + 5, what="the next CMD")[0]
    assert time.monotonic() - killed_at < ttl + 1
    time.sleep(1.5 * ttl)
    assert starts() == [first, second]
    assert [alive(pid) for pid in (first, second)] == [False, True]
    assert sum(run.process.poll() is None for run in runs) == 2  # the next, and the third


def test_a_stop_signal_while_waiting_leaves_the_queue(start: Any, tmp_path: Path) -> None:
    from django_dlock.backends import backend_for
    from django_dlock.models import LockWaiter

    make_lock("job:queued", "someone-else")
    ran = tmp_path / "ran"
    run = start("job:queued", "--wait", "--", "touch", str(ran))
    wait_for(lambda: LockWaiter.objects.filter(resource="job:queued").exists(), what="the queue")

    run.process.send_signal(signal.SIGTERM)

    assert run.wait() == 128 + signal.SIGTERM, run.stderr
    assert run.stderr.splitlines()[-1] == (
        "CommandError: Stopped by SIGTERM while waiting for the lock on 'job:queued'."
    )
    # Its ticket is gone, or (a signal that came as the ticket was written)
    # no longer counts: its process is gone, or its ticket expired.
    wait_for(
        lambda: backend_for("default").queue.queue_state("job:queued", None).ahead == 0,
        15,
        "no live waiter left",
    )
    assert not ran.exists()


def test_limit_runs_n_at_once_and_labels_show_who(start: Any, tmp_path: Path) -> None:
    for n in (1, 2):
        ready = tmp_path / f"ready-{n}"
        start(
            "gpu",
            "--limit",
            "2",
            "--label",
            f"host-{n}",
            "--",
            "sh",
            "-c",
            f"touch {ready}; sleep 300",
        )
        wait_for(ready.exists, what=f"run {n}")

    third = start("gpu", "--limit", "2", "--", "true")
    assert third.wait() == 75
    holders = DistributedLock.objects.holders("gpu")
    assert sorted(hold.label for hold in holders) == ["host-1", "host-2"]
    assert {hold.limit for hold in holders} == {2}


def test_shared_runs_beside_readers_not_beside_a_writer(start: Any, tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    start("doc:7", "--shared", "--", "sh", "-c", f"touch {ready}; sleep 300")
    wait_for(ready.exists, what="the first reader")

    assert start("doc:7", "--shared", "--", "true").wait() == 0
    assert start("doc:7", "--", "true").wait() == 75
