"""Leader observers: ``observe_leader(resource)`` yields each new leader (its
label, and its term: the hold's fencing token) and ``None`` when nobody leads,
woken by the release, at the leader's expiry where nothing announces it; it
reads only, and never queues for the lock (docs/usage.md, "Observing the leader")."""

from __future__ import annotations

import asyncio
import os
import queue
import signal
import threading
import time
from collections.abc import Generator, Iterator
from typing import Any

import pytest
from django.db import DatabaseError, connection, connections

from django_dlock import Leader, aobserve_leader, leaders, lock, observe_leader
from django_dlock.listeners.base import Listener, Watch
from django_dlock.listeners.registry import stop_listeners
from django_dlock.locking.wakeup import Wakeup
from django_dlock.models import DistributedLock, LockWaiter
from tests import workers_leaders
from tests.docs_utils import run_example
from tests.utils import database_settings, run_in_thread, spawn, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

Locks = DistributedLock.objects

# How long a process has to start Django and show up (a loaded machine).
START = 60.0
# How soon after its cause an observer must report a change it is woken for:
# well before any look of its own when the leader's ttl is 30 s.
PROMPTLY = 1.0


Event = tuple[str, str | None, int | None, float]


class Processes:
    """Spawned processes of one test, killed at its end; what they report."""

    def __init__(self) -> None:
        self.events: Any = spawn.Queue()  # the candidates': ("leads" | "released", label, term, t)
        self.seen: Any = spawn.Queue()  # the observers': ("sees", label or None, term, t)
        self.started: list[Any] = []
        self.stops: list[Any] = []  # kept: a child unpickles its event after start()
        self.early: list[Event] = []  # candidates' events read before they were asked for

    def start(self, target: Any, *args: Any) -> Any:
        process = spawn.Process(target=target, args=(database_settings(), *args), daemon=True)
        process.start()
        self.started.append(process)
        return process

    def lead(self, resource: str, label: str, ttl: float) -> tuple[Any, Any]:
        stop = spawn.Event()
        self.stops.append(stop)
        return self.start(workers_leaders.lead, resource, label, ttl, stop, self.events), stop

    def observe(self, resource: str, *, read_only: bool = False) -> Any:
        return self.start(workers_leaders.observe, resource, self.seen, read_only)

    def next_event(self, kind: str, label: str) -> int:
        """The term of ``label``'s next ``kind`` event. Another candidate's may come
        first: a standby that the release handed the lock to can report that it
        leads before the releasing process reports its release. Those are kept
        for the calls that ask for them (each process's own come in order)."""
        deadline = time.monotonic() + START
        while True:
            for event in self.early:
                if event[:2] == (kind, label):
                    self.early.remove(event)
                    assert event[2] is not None, event
                    return event[2]
            try:
                self.early.append(self.events.get(timeout=max(deadline - time.monotonic(), 0.01)))
            except queue.Empty:
                raise AssertionError(f"no {kind!r} of {label!r}; others: {self.early}") from None

    def sees_until(self, label: str | None, seconds: float = START) -> list[Event]:
        """What the observer reports, up to and including ``label``'s leadership."""
        seen: list[Event] = []
        deadline = time.monotonic() + seconds
        while not seen or seen[-1][1] != label:
            try:
                seen.append(self.seen.get(timeout=max(deadline - time.monotonic(), 0.01)))
            except queue.Empty:
                raise AssertionError(f"no {label!r} within {seconds} s; seen {seen}") from None
        return seen

    def stop_all(self) -> None:
        for process in self.started:
            if process.is_alive():
                process.kill()
            process.join(10)


@pytest.fixture
def processes() -> Iterator[Processes]:
    started = Processes()
    try:
        yield started
    finally:
        started.stop_all()


def stands_by(resource: str) -> None:
    wait_for(
        lambda: LockWaiter.objects.filter(resource=resource).exists(), START, "a candidate queued"
    )


def test_an_observer_sees_the_leader_of_another_process_and_after_a_kill_the_next_with_a_larger_term(
    processes: Processes,
) -> None:
    ttl, margin = 3.0, 3.0
    processes.observe("leader:kill")
    leader, _ = processes.lead("leader:kill", "a", ttl)
    term_a = processes.next_event("leads", "a")
    assert [event[1:3] for event in processes.sees_until("a")][-1] == ("a", term_a)
    processes.lead("leader:kill", "b", ttl)
    stands_by("leader:kill")

    os.kill(leader.pid, signal.SIGKILL)  # nothing releases: its lease runs out
    killed = time.monotonic()
    seen = processes.sees_until("b", ttl + margin + 5)
    term_b = processes.next_event("leads", "b")

    # Between the two terms, at most "no leader" (its lease ran out before b took it).
    assert [event[1] for event in seen] in (["b"], [None, "b"])
    assert seen[-1][2] == term_b
    assert term_b > term_a
    assert seen[-1][3] - killed <= ttl + margin, f"{seen[-1][3] - killed:.2f} s after the kill"


@pytest.mark.parametrize(
    ("standby", "read_only"),
    [(True, False), (False, False), (True, True)],
    ids=["to-a-standby", "to-nobody", "read-only-observer"],
)
def test_a_release_reaches_the_observer_promptly(
    processes: Processes, standby: bool, read_only: bool
) -> None:
    processes.observe("leader:release", read_only=read_only)
    _, stop = processes.lead("leader:release", "a", 30)
    term_a = processes.next_event("leads", "a")
    processes.sees_until("a")
    if standby:
        processes.lead("leader:release", "b", 30)
        stands_by("leader:release")

    stopped = time.monotonic()
    stop.set()  # a leaves, and releases
    released_term = processes.next_event("released", "a")
    seen = processes.sees_until("b" if standby else None)

    assert released_term == term_a
    # The first change seen is the release's. (Where the release does not hand
    # the lock over, MariaDB, the standby takes it on its next look: between
    # the two, nobody leads.)
    assert seen[0][3] - stopped < PROMPTLY, f"{seen[0][3] - stopped:.2f} s after the release"
    if standby:
        term_b = processes.next_event("leads", "b")
        assert [event[1] for event in seen] in (["b"], [None, "b"])
        assert seen[-1][2] == term_b
        assert term_b > term_a
    else:
        assert [event[1:3] for event in seen] == [(None, None)]


@pytest.mark.requires_postgres
@pytest.mark.django_db(transaction=True, databases=["default", "locks"])
@pytest.mark.parametrize("read_only", [False, True], ids=["read-write", "read-only"])
def test_on_postgresql_the_release_itself_wakes_an_observer_that_would_not_look_for_10_s(
    processes: Processes, settings: Any, read_only: bool
) -> None:
    """The observer listens to the channel of the head of the candidates'
    queue; with a leader whose lease has 30 s left, it looks by itself only
    every WAITER_TTL (10 s), and no poll could come in time. Also on a
    connection (and so a listener) that may only read."""
    _, stop = processes.lead("leader:notify", "a", 30)
    processes.next_event("leads", "a")
    processes.lead("leader:notify", "b", 30)
    stands_by("leader:notify")
    seen: queue.Queue[tuple[Leader | None, float]] = queue.Queue()
    settings.DLOCK_BACKOFF_MAX = 30
    alias = "locks"  # the same database, through a connection of its own
    options = connections[alias].settings_dict["OPTIONS"]
    read_only_options = {"options": "-c default_transaction_read_only=on"} if read_only else {}

    def observe() -> None:
        try:
            for leader in observe_leader("leader:notify", using=alias):
                seen.put((leader, time.monotonic()))
                if leader is not None and leader.label == "b":
                    return
        finally:
            connections[alias].close()

    connections[alias].settings_dict["OPTIONS"] = {**options, **read_only_options}
    try:
        if read_only:  # the connection may not write
            with pytest.raises(DatabaseError, match="read-only"):
                Locks.using(alias).filter(resource="leader:notify").update(label="x")
            connections[alias].close()
        observer = threading.Thread(target=observe, daemon=True)
        observer.start()
        first, _ = seen.get(timeout=START)
        assert first is not None and first.label == "a"
        # Yielded once its LISTEN was in place: it sleeps on the channel now.
        stopped = time.monotonic()
        stop.set()
        after, at = seen.get(timeout=START)
        observer.join(START)
    finally:
        stop_listeners()  # the alias's listener, on the read-only settings
        connections[alias].settings_dict["OPTIONS"] = options
    assert after is not None and after.label == "b" and after.term > first.term
    assert at - stopped < PROMPTLY, f"{at - stopped:.2f} s after the release"


def test_observing_neither_queues_nor_writes_and_a_renewal_is_not_a_new_term() -> None:
    seen: queue.Queue[Leader | None] = queue.Queue()
    stop = threading.Event()

    def observe() -> None:
        try:
            for leader in observe_leader("leader:quiet"):
                seen.put(leader)
                if stop.is_set():
                    return
        finally:
            connection.close()

    threading.Thread(target=observe, daemon=True).start()
    assert seen.get(timeout=START) is None  # nobody leads yet
    with lock("leader:quiet", ttl=0.6, auto_renew=True, label="web-1", timeout=5) as held:
        leader = seen.get(timeout=START)
        [hold] = Locks.holders("leader:quiet")
        assert leader == Leader("web-1", held.fencing_token, hold.acquired_at)
        # A candidate that does not wait is refused by the holder, not by the observer.
        assert Locks.acquire("leader:quiet", owner="other", ttl=5) is None
        assert not LockWaiter.objects.filter(resource="leader:quiet").exists()
        expiries = {held.expires_at}
        row = Locks.filter(resource="leader:quiet")

        def renewed_three_times() -> bool:
            expiries.add(row.values_list("expires_at", flat=True).get())
            return len(expiries) >= 4

        wait_for(renewed_three_times, START, "three renewals")
        stop.set()
    assert seen.get(timeout=START) is None  # released: nobody leads
    assert seen.empty()  # and nothing in between: renewals keep the term


def test_the_async_observer_sees_a_leader_and_its_release() -> None:
    async def observe() -> list[Leader | None]:
        seen: list[Leader | None] = []
        async for leader in aobserve_leader("leader:async"):
            seen.append(leader)
            if leader is not None:
                await asyncio.to_thread(release)
            elif len(seen) > 1:
                return seen
        return seen

    def release() -> None:
        try:
            Locks.release("leader:async", "holder")
        finally:
            connections.close_all()

    held = Locks.acquire("leader:async", owner="holder", ttl=30, label="worker-7")
    assert held is not None
    seen = asyncio.run(observe())
    assert seen == [Leader("worker-7", held.fencing_token, held.acquired_at), None]


def test_an_expired_leader_is_no_leader_at_its_expiry() -> None:
    """No release tells of an expiry: the observer looks when the lease ends."""
    held = Locks.acquire("leader:expiry", owner="crashed", ttl=1.5, label="gone")
    assert held is not None
    observed = observe_leader("leader:expiry")
    assert next(observed) == Leader("gone", held.fencing_token, held.acquired_at)
    assert next(observed) is None
    expires_at = Locks.filter(resource="leader:expiry").values_list("expires_at", flat=True).get()
    assert expires_at == held.expires_at  # it ran out; nobody released it
    observed.close()


def first_changes(count: int) -> Any:
    """``observe_leader`` for the docs' examples, which observe for ever: its
    first ``count`` changes, then the end (and the thread's connection closed)."""

    def observe(resource: str) -> Generator[Leader | None]:
        try:
            for number, leader in enumerate(observe_leader(resource), 1):
                yield leader
                if number == count:
                    return
        finally:
            connection.close()

    return observe


def test_the_usage_example_reports_the_leader_and_nobody(monkeypatch: pytest.MonkeyPatch) -> None:
    lines: list[str] = []
    # (What the example imports from django_dlock.)
    monkeypatch.setattr(leaders, "observe_leader", first_changes(3))
    namespace = run_example("observe leader", print=lambda line: lines.append(line))
    follower = run_in_thread(lambda outcome: namespace["follow"]("scheduler"))
    wait_for(lambda: lines == ["nobody leads"], START, "the first state")
    held = Locks.acquire("scheduler", owner="w", ttl=30, label="web-3 pid 4121")
    assert held is not None
    wait_for(lambda: len(lines) == 2, START, "the leader")
    Locks.release("scheduler", "w")
    follower["thread"].join(START)
    assert "error" not in follower
    since = f"{held.acquired_at:%H:%M:%S}"
    assert lines == [
        "nobody leads",
        f"web-3 pid 4121 leads, term {held.fencing_token}, since {since}",
        "nobody leads",
    ]


def test_the_recipe_follows_the_scheduler_leader(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(leaders, "observe_leader", first_changes(2))
    namespace = run_example("follow leader")
    current = namespace["current"]
    held = Locks.acquire("scheduler:leader", owner="w", ttl=30, label="host-1 pid 7")
    assert held is not None
    thread = namespace["follow_scheduler_leader"]()
    wait_for(lambda: current["leader"] is not None, START, "the leader")
    assert (current["leader"].label, current["leader"].term) == ("host-1 pid 7", held.fencing_token)
    Locks.release("scheduler:leader", "w")
    thread.join(START)
    assert not thread.is_alive()  # it saw the two changes
    assert current["leader"] is None


def test_the_listener_wakes_the_observers_of_a_channel_and_keeps_no_ticket_for_them() -> None:
    """What the thread does with a wake-up (``_dispatch``), without a connection."""
    listener: Listener[Any] = Listener("default")
    observing, other, waiting = Wakeup(), Wakeup(), Wakeup()
    observer = Watch(listener, observing, observer=True)
    observer.overhears = "dlock_head"
    elsewhere = Watch(listener, other, observer=True)
    elsewhere.overhears = "dlock_another"
    listener._watches += [observer, elsewhere]

    listener._dispatch("7", "dlock_head")  # a release woke that head, in another process
    assert observing.wait(0) and not other.wait(0)
    listener._dispatch("8", listener.channel)  # a ticket of this process's, unknown here
    assert set(listener._unclaimed) == set()  # only observers watch: nobody will claim it

    waiter = Watch(listener, waiting)  # a waiter between queuing and claiming its ticket
    listener._watches.append(waiter)
    listener._dispatch("9", listener.channel)
    assert set(listener._unclaimed) == {9}
    waiter.claim(9)
    assert waiting.wait(0) and waiting.as_head
    os.close(listener._wake_read)  # (its thread never started)
    os.close(listener._wake_write)
