"""``django_dlock.contrib.celery`` with real worker processes and a real Redis broker.

The tests start their own ``redis-server`` on a free loopback port and Celery
workers (``tests/workers_celery.py``) against the test database.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("celery")
redis = pytest.importorskip("redis")

from django.db import connection  # noqa: E402

from django_dlock.models import DistributedLock  # noqa: E402
from tests.task_processes import CeleryWorkers, Redis  # noqa: E402
from tests.utils import import_without, wait_for  # noqa: E402

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parent.parent
Locks = DistributedLock.objects


@pytest.fixture(scope="module")
def broker_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    try:
        server = Redis(tmp_path_factory.mktemp("redis"))
    except FileNotFoundError as missing:
        pytest.skip(str(missing))
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="module")
def workers(
    broker_url: str, django_db_setup: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CeleryWorkers]:
    from tests.workers_celery import app

    # This process sends the tasks and reads their results through the same broker.
    app.conf.update(broker_url=broker_url, result_backend=broker_url)
    log_dir = tmp_path_factory.mktemp("celery-logs")
    started = CeleryWorkers(log_dir, connection.settings_dict["NAME"], broker_url)
    try:
        started.start("w1")
        started.start("w2")
        yield started
    finally:
        started.stop_all()


@pytest.fixture
def runs(workers: CeleryWorkers) -> Callable[[str | None], list[dict[str, Any]]]:
    """The task runs recorded so far (of one kind, or all)."""
    client = redis.Redis.from_url(workers.broker_url)
    client.delete("runs", "skips")

    def read(kind: str | None = None) -> list[dict[str, Any]]:
        entries = [json.loads(raw) for raw in client.lrange("runs", 0, -1)]
        return [entry for entry in entries if kind is None or entry["kind"] == kind]

    return read


def test_tasks_for_one_key_never_overlap_across_two_workers(
    workers: CeleryWorkers, runs: Callable[..., list[dict[str, Any]]]
) -> None:
    from tests.workers_celery import exclusive

    results = [exclusive.delay("2026-05", 0.3) for _ in range(6)]
    tokens = [result.get(timeout=120) for result in results]
    done = runs("exclusive")
    assert len(done) == 6
    assert len({entry["pid"] for entry in done}) == 2, "both workers should have run some"
    done.sort(key=lambda entry: entry["began"])
    for before, after in zip(done, done[1:], strict=False):
        assert after["began"] >= before["ended"], "two runs held the lock at once"
    assert len(set(tokens)) == 6  # each run got its own, increasing, fencing token
    assert [entry["token"] for entry in done] == sorted(tokens)
    assert not Locks.active().exists()  # released after each run


def test_a_skipped_run_returns_the_sentinel_logs_its_task_id_and_sends_a_signal(
    workers: CeleryWorkers, runs: Callable[..., list[dict[str, Any]]]
) -> None:
    from django_dlock.contrib.celery import SKIPPED
    from tests.workers_celery import skipping

    Locks.acquire("report:2026-06", "someone-else", ttl=60)
    skipped = skipping.delay("2026-06")
    assert skipped.get(timeout=60) == SKIPPED
    assert skipped.state == "SUCCESS"
    assert runs("skipping") == []
    client = redis.Redis.from_url(workers.broker_url)
    [skip] = [json.loads(raw) for raw in client.lrange("skips", 0, -1)]
    assert skip == {
        "resource": "report:2026-06",
        "task_name": "tests.skipping",
        "task_id": skipped.id,
        "args": ["2026-06"],
        "kwargs": {},
    }
    logs = workers.log("w1") + workers.log("w2")
    [line] = [line for line in logs.splitlines() if f"[{skipped.id}]" in line and "Skipped" in line]
    assert "tests.skipping" in line and "'2026-06'" in line and "report:2026-06" in line
    assert "someone-else" not in logs  # never an owner

    Locks.release("report:2026-06", "someone-else")
    assert skipping.delay("2026-06").get(timeout=60) == "ran"
    assert len(runs("skipping")) == 1


def test_retry_policy_runs_the_task_once_the_holders_lock_expires(
    runs: Callable[..., list[dict[str, Any]]],
) -> None:
    from tests.workers_celery import retrying

    held = Locks.acquire("report:2026-07", "crashed-holder", ttl=2)
    assert held is not None
    assert retrying.delay("2026-07").get(timeout=60) == "ran"
    [entry] = runs("retrying")
    assert entry["retries"] >= 1
    assert datetime.fromtimestamp(entry["began"], UTC) >= held.expires_at
    assert entry["token"] > held.fencing_token


def test_raise_policy_fails_the_task(runs: Callable[..., list[dict[str, Any]]]) -> None:
    from tests.workers_celery import raising

    Locks.acquire("report:2026-08", "someone-else", ttl=60)
    # Any exception: Celery rebuilds it from the result backend.
    with pytest.raises(Exception) as failure:
        raising.delay("2026-08").get(timeout=60)
    assert type(failure.value).__name__ == "LockNotAcquired"
    assert runs("raising") == []


def test_a_killed_worker_leaves_the_lock_to_expire_then_the_task_runs_again(
    workers: CeleryWorkers, runs: Callable[..., list[dict[str, Any]]]
) -> None:
    from tests.workers_celery import long_running

    doomed = workers.start("doomed", queues="doomed")
    long_running.apply_async(("2026-09", 60), queue="doomed")
    wait_for(lambda: runs("long_running"), 60, "the first run to start")
    abandoned = wait_for(lambda: Locks.active().filter(resource="report:2026-09").first())

    doomed.send_signal(signal.SIGKILL)
    doomed.wait(10)
    # Nobody released it: still held by the dead worker until it expires.
    still = Locks.active().get(resource="report:2026-09")
    assert still.owner == abandoned.owner

    again = long_running.delay("2026-09", 0)
    token = again.get(timeout=60)
    [first, second] = runs("long_running")
    assert second["began"] >= Locks.get(resource="report:2026-09").acquired_at.timestamp() - 1
    assert datetime.fromtimestamp(second["began"], UTC) >= still.expires_at
    assert token > first["token"]
    assert [entry["token"] for entry in runs("long_running_done")] == [token]


# -- without a worker ----------------------------------------------------------------


def test_on_locked_must_be_a_known_policy() -> None:
    from django_dlock.contrib.celery import locked_task

    with pytest.raises(ValueError, match="on_locked"):
        locked_task("x", on_locked="wait")  # type: ignore[arg-type]


def test_the_key_is_filled_from_the_arguments_by_name_with_defaults() -> None:
    from django_dlock.contrib.celery import locked_task

    @locked_task("export:{kind}-{year}")
    def export(kind: str, year: int = 2026) -> bool:
        return Locks.active().filter(resource=f"export:{kind}-{year}").exists()

    assert export("csv") is True
    assert export(kind="json", year=2025) is True
    assert not Locks.active().exists()


def test_a_direct_call_with_the_retry_policy_raises() -> None:
    from django_dlock import LockNotAcquired
    from django_dlock.contrib.celery import locked_task

    @locked_task("export:{kind}", on_locked="retry")
    def export(kind: str) -> None:
        pytest.fail("must not run")

    Locks.acquire("export:csv", "someone-else", ttl=60)
    with pytest.raises(LockNotAcquired):
        export("csv")


def test_lock_not_acquired_from_the_tasks_own_code_is_not_taken_for_the_policy() -> None:
    from django_dlock import LockNotAcquired, lock
    from django_dlock.contrib.celery import locked_task

    @locked_task("export:{kind}", on_locked="skip")
    def export(kind: str) -> None:
        with lock("export:shared"):
            pass

    Locks.acquire("export:shared", "someone-else", ttl=60)
    with pytest.raises(LockNotAcquired, match="export:shared"):
        export("csv")


def test_the_callers_see_the_task_signature_without_the_injected_parameters() -> None:
    import inspect

    from tests.workers_celery import exclusive, with_handle

    assert list(inspect.signature(exclusive).parameters) == ["month", "hold"]
    assert list(inspect.signature(with_handle).parameters) == ["name"]
    # Celery checks the arguments before sending: nothing reaches a worker.
    with pytest.raises(TypeError):
        exclusive.delay("2026-05")
    with pytest.raises(TypeError):
        exclusive.delay("2026-05", 1, fencing_token=3)
    with pytest.raises(TypeError):
        with_handle.delay(nom="x")


def test_locked_task_above_the_celery_decorator_is_refused() -> None:
    from django_dlock.contrib.celery import locked_task
    from tests.workers_celery import app

    with pytest.raises(TypeError, match="underneath"):

        @locked_task("x:{a}")
        @app.task(name="tests.wrong_order")
        def wrong_order(a: int) -> None: ...

    from celery import shared_task

    with pytest.raises(TypeError, match="underneath"):

        @locked_task("x:{a}")
        @shared_task
        def wrong_order_shared(a: int) -> None: ...


def test_a_key_placeholder_that_names_no_parameter_is_refused_at_decoration() -> None:
    from django_dlock.contrib.celery import locked_task

    with pytest.raises(ValueError, match="order_id"):

        @locked_task("order:{order_id}")
        def ship(order: int) -> None: ...

    with pytest.raises(ValueError, match="fencing_token"):

        @locked_task("order:{fencing_token}")
        def ship_token(order: int, fencing_token: int) -> None: ...


# -- with workers: retry, the handle, a lost lock, a redelivery -----------------------------


def test_retry_waits_in_the_queue_then_backs_off_so_same_key_runs_follow_each_other(
    workers: CeleryWorkers, runs: Callable[..., list[dict[str, Any]]]
) -> None:
    """ttl 30, so a countdown of the holder's remaining ttl would idle for most of it."""
    from tests.workers_celery import contended

    results = [contended.delay("k", 1.5) for _ in range(4)]
    tokens = [result.get(timeout=120) for result in results]
    done = sorted(runs("contended"), key=lambda entry: entry["began"])
    assert len(done) == 4 and len(set(tokens)) == 4
    for before, after in zip(done, done[1:], strict=False):
        assert after["began"] >= before["ended"], "two runs held the lock at once"
        # Never a whole ttl (30 s) while the lock is free; usually a hand-over of
        # milliseconds (bench: benchmarks/tasks.py). Loose for a loaded machine.
        assert after["began"] - before["ended"] < 10


def test_a_bound_task_retries_and_names_its_lock_without_self(workers: CeleryWorkers) -> None:
    from tests.workers_celery import bound

    held = Locks.acquire("bound:b", "crashed-holder", ttl=1)
    assert held is not None
    retries, token = bound.delay("b").get(timeout=60)
    assert retries >= 1 and token > held.fencing_token


def test_the_body_gets_the_lock_handle(workers: CeleryWorkers) -> None:
    from tests.workers_celery import with_handle

    assert with_handle.delay("h").get(timeout=60) == ["handle:h", True, False]


@pytest.mark.parametrize(
    ("pool", "step"),
    [("solo", None), ("prefork", None), ("threads", 0.1)],  # a thread: between two steps
)
def test_on_lost_stop_ends_the_body_soon_after_a_force_release_with_the_real_reason(
    workers: CeleryWorkers,
    runs: Callable[..., list[dict[str, Any]]],
    pool: str,
    step: float | None,
) -> None:
    from tests.workers_celery import stoppable

    workers.start(f"stop-{pool}", queues=f"stop-{pool}", pool=pool)
    name = f"force-{pool}"
    result = stoppable.apply_async((name, 60), {"step": step}, queue=f"stop-{pool}")
    wait_for(lambda: runs("stoppable"), 60, "the run to start")
    assert Locks.force_release(f"stop:{name}")
    released = datetime.now(UTC).timestamp()
    with pytest.raises(Exception) as failure:
        result.get(timeout=30)
    assert type(failure.value).__name__ == "LockExpired"
    assert "it was released or purged" in str(failure.value)
    [stopped] = runs("stopped")
    assert stopped["expired"]  # the body sees a LockExpired (a subclass in a thread)
    assert stopped["error"] == "LockExpired" or pool == "threads"
    assert stopped["at"] - released <= 3 / 3 + 1 + 0.5  # ttl/3 + 1 s, and the clocks' skew
    assert runs("not_stopped") == []


def test_a_task_redelivered_after_its_worker_was_killed_takes_its_own_lock_back(
    workers: CeleryWorkers, runs: Callable[..., list[dict[str, Any]]]
) -> None:
    from tests.workers_celery import redelivered

    workers.start("acks-late", queues="acks-late", pool="prefork")
    result = redelivered.apply_async(("once",), queue="acks-late")
    [first] = wait_for(lambda: runs("redelivered"), 60, "the first delivery")
    held = Locks.active().get(resource="redeliver:once")
    os.kill(first["pid"], signal.SIGKILL)  # the pool's child: the worker requeues the task
    killed = datetime.now(UTC).timestamp()
    token = result.get(timeout=60)
    first, again = runs("redelivered")
    assert (first["first"], again["first"]) == (True, False)
    assert again["began"] - killed < 30 + 1  # within the ttl + 1 s: not after its expiry
    assert token == held.fencing_token  # its own lock, taken back: the same token
    assert not Locks.active().filter(resource="redeliver:once").exists()


def test_the_example_projects_worker_runs_its_task(
    broker_url: str, tmp_path: Path, django_db_setup: None
) -> None:
    """What docs/celery.md says: from a clone, pip install -e ".[api,celery]" --group
    example, then celery -A example_project worker."""
    env = {
        **{k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"},
        "DATABASE_URL": f"sqlite:///{tmp_path / 'example.sqlite3'}",
        "CELERY_BROKER_URL": broker_url,
    }
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--no-input", "-v0"], cwd=ROOT, env=env, check=True
    )
    log = tmp_path / "example-worker.log"
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "example_project", "worker", "--pool=solo",
         "--queues=example", "--loglevel=INFO", "--without-gossip", "--without-mingle", "--without-heartbeat",
         f"--logfile={log}"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        from celery import Celery

        sender = Celery(broker=broker_url)
        # Its own queue: the other tests' workers take the default one.
        sender.send_task(
            "example_project.tasks.build_monthly_report", args=["2026-05"], queue="example"
        )
        try:
            wait_for(lambda: log.exists() and "succeeded" in log.read_text(), 60, "the task")
        except AssertionError:
            pytest.fail(log.read_text() if log.exists() else "the worker wrote no log")
        assert "report 2026-05 built with fencing token 1" in log.read_text()
    finally:
        worker.terminate()
        worker.wait(15)


# -- on_duplicate: enqueue-time de-duplication -----------------------------------------


def _mark(resource: str) -> Any:
    """The valid mark of a queued call whose lock is ``resource``, or None."""
    return Locks.active().filter(resource=f"queued:{resource}").first()


def _sent(result: Any) -> Any:
    """The AsyncResult of an enqueue that was not refused."""
    assert result is not None, "the enqueue was refused"
    return result


def test_a_call_queued_and_not_yet_running_makes_an_equal_enqueue_a_duplicate(
    workers: CeleryWorkers, runs: Callable[..., list[dict[str, Any]]]
) -> None:
    from django_dlock.contrib.celery import AlreadyQueued
    from django_dlock.exceptions import DlockError
    from tests.workers_celery import once, once_skipping

    first = _sent(once.apply_async(("q",), queue="parked-once"))  # no worker takes it yet
    assert _mark("once:q").label == first.id
    with pytest.raises(AlreadyQueued) as refused:
        once.apply_async(("q",), queue="parked-once")
    assert isinstance(refused.value, DlockError)
    assert refused.value.task_id == first.id
    assert str(refused.value) == f"tests.once was not sent: task {first.id} is queued ('once:q')."
    assert once_skipping.delay("q") is None  # the same lock: "skip" sends nothing
    assert once.delay("other") is not None  # another lock is no duplicate
    assert _mark("once:q").label == first.id

    workers.start("once-parked", queues="parked-once")
    assert first.get(timeout=60) == "ran"
    assert [entry["month"] for entry in runs("once")].count("q") == 1
    assert runs("once_skipping") == []
    assert _mark("once:q") is None and not Locks.active().filter(resource="once:q").exists()
    assert _sent(once.delay("q")).get(timeout=60) == "ran"  # nothing queued or running: sent


def test_a_running_call_makes_an_equal_enqueue_a_duplicate_until_it_ends(
    workers: CeleryWorkers, runs: Callable[..., list[dict[str, Any]]]
) -> None:
    from django_dlock.contrib.celery import AlreadyQueued
    from tests.workers_celery import once

    running = _sent(once.delay("r", True))
    wait_for(lambda: runs("once"), 60, "the run to start")
    assert _mark("once:r") is None  # given up once the run took its lock
    with pytest.raises(AlreadyQueued) as refused:
        once.delay("r")
    assert refused.value.task_id is None  # a run holds the lock
    assert _mark("once:r") is None  # the refused enqueue left no mark behind

    redis.Redis.from_url(workers.broker_url).rpush("gate:r", "go")
    assert running.get(timeout=60) == "ran"
    assert _sent(once.delay("r")).get(timeout=60) == "ran"
    assert len(runs("once")) == 2


def test_a_worker_killed_mid_run_refuses_equal_enqueues_only_until_the_locks_ttl(
    workers: CeleryWorkers, runs: Callable[..., list[dict[str, Any]]]
) -> None:
    from django_dlock.contrib.celery import AlreadyQueued
    from tests.workers_celery import once

    doomed = workers.start("once-doomed", queues="once-doomed")
    once.apply_async(("k", True), queue="once-doomed")
    wait_for(lambda: runs("once"), 60, "the run to start")
    doomed.send_signal(signal.SIGKILL)
    doomed.wait(10)
    held = Locks.active().get(resource="once:k")  # renewed by nobody now (ttl 3)
    assert _mark("once:k") is None  # no queued mark outlives the run's start

    with pytest.raises(AlreadyQueued):
        once.delay("k")

    def sent() -> Any:
        try:
            return once.delay("k")
        except AlreadyQueued:
            return None

    again = wait_for(sent, 30, "an enqueue to be accepted")
    assert datetime.now(UTC) >= held.expires_at - timedelta(seconds=0.5)  # clocks' skew
    assert _sent(again).get(timeout=60) == "ran"
    assert len(runs("once")) == 2


def test_a_lost_message_leaves_its_mark_only_until_queued_ttl(
    workers: CeleryWorkers, runs: Callable[..., list[dict[str, Any]]]
) -> None:
    from tests.workers_celery import once_skipping

    client = redis.Redis.from_url(workers.broker_url)
    assert once_skipping.apply_async(("lost",), queue="nobody") is not None
    mark = _mark("once:lost")
    assert client.delete("nobody") == 1  # the broker lost it (a purge, say)
    assert once_skipping.apply_async(("lost",), queue="nobody") is None
    again = wait_for(lambda: once_skipping.apply_async(("lost",), queue="nobody"), 30, "a send")
    assert datetime.now(UTC) >= mark.expires_at - timedelta(seconds=0.5)  # queued_ttl=2
    assert _mark("once:lost").label == again.id
    client.delete("nobody")


def test_a_call_that_retries_keeps_its_mark_until_its_run(
    workers: CeleryWorkers, runs: Callable[..., list[dict[str, Any]]]
) -> None:
    from django_dlock.contrib.celery import AlreadyQueued
    from tests.workers_celery import once_retrying

    first = _sent(once_retrying.apply_async(("retried",), queue="parked-retry"))
    Locks.acquire("once:retried", "someone-else", ttl=60)  # taken before the run
    workers.start("once-retry", queues="parked-retry")
    wait_for(lambda: first.state == "RETRY", 60, "the run to retry")
    refusals: list[str | None] = []
    for _ in range(20):  # the task is sent again on each retry, under its own id
        with pytest.raises(AlreadyQueued) as refused:
            once_retrying.delay("retried")
        refusals.append(refused.value.task_id)
    assert set(refusals) == {first.id}  # refused by its mark, all along
    Locks.release("once:retried", "someone-else")
    assert first.get(timeout=60) >= 1  # it retried, then ran once
    assert [entry["month"] for entry in runs("once_retrying")] == ["retried"]
    assert _mark("once:retried") is None


def test_on_duplicate_arguments_are_checked_at_decoration() -> None:
    from celery import Celery

    from django_dlock.contrib.celery import EnqueueOnce, locked_task
    from django_dlock.exceptions import InvalidArgument

    app = Celery("decoration")  # its own: tests.workers_celery's must not bind before its broker

    with pytest.raises(ValueError, match="on_duplicate must be None, 'raise' or 'skip'"):
        locked_task("x:{a}", on_duplicate="return")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="exclusive lock"):
        locked_task("x:{a}", shared=True, on_duplicate="raise")
    with pytest.raises(ValueError, match="exclusive lock"):
        locked_task("x:{a}", limit=2, on_duplicate="skip")
    with pytest.raises(ValueError, match="give on_duplicate"):
        locked_task("x:{a}", queued_ttl=60)
    with pytest.raises(InvalidArgument):
        locked_task("x:{a}", on_duplicate="raise", queued_ttl=-1)

    def plain(a: int) -> None: ...

    # shared=False: a shared task is made again in every Celery app that finalizes later in
    # this process (the README's example's), and would raise there.
    with pytest.raises(TypeError, match="base=EnqueueOnce on plain"):
        app.task(name="tests.plain_once", base=EnqueueOnce, lazy=False, shared=False)(
            locked_task("x:{a}")(plain)
        )


def test_on_duplicate_without_the_enqueue_once_task_class_fails_its_run() -> None:
    from celery import Celery

    from django_dlock.contrib.celery import locked_task

    # Its own app: apply() would bind tests.workers_celery's result backend before the
    # workers fixture gives it the test broker (and later tests would wait on another).
    app = Celery("unmarked")

    @app.task(name="tests.unmarked", lazy=False, shared=False)
    @locked_task("x:{a}", on_duplicate="raise")
    def unmarked(a: int) -> None:
        pytest.fail("must not run")

    result = unmarked.apply((1,))
    assert isinstance(result.result, TypeError)
    assert "base=EnqueueOnce" in str(result.result)


def test_without_celery_the_import_names_what_to_install() -> None:
    # Not a bare "No module named ...": the error says which extra brings the package.
    error = import_without("django_dlock.contrib.celery", "celery")
    assert error.startswith("ModuleNotFoundError: "), error
    assert 'pip install "django-dlock[celery]"' in error, error
