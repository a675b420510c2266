"""Leader hand-over: how long a resource is without a leader after its leader
resigns, and after its leader is killed.

Candidates are spawned processes, each in ``lock(resource, timeout=inf,
auto_renew=True)``: the one inside leads, the other waits. A leader that is
told to resign leaves the block and campaigns again; one that is killed
(SIGKILL, by its process handle) leaves its lease to expire, and a new
candidate is started to stand by. Times are ``time.monotonic()``, one clock
for every process of the host.
"""

from __future__ import annotations

import multiprocessing
import random
import statistics
import sys
import time
from typing import Any

spawn = multiprocessing.get_context("spawn")
TTL = 3.0  # the leaders' lease, seconds


def campaign(alias: str, resource: str, name: str, inbox: Any, outbox: Any) -> None:
    """Lead whenever elected; resign when told ("resign"), stop ("stop")."""
    from benchmarks import kinds_setup

    kinds_setup.configure()
    from django_dlock import lock

    while True:
        with lock(
            resource, using=alias, ttl=TTL, timeout=float("inf"), auto_renew=True, label=name
        ) as held:
            outbox.put(("leading", name, time.monotonic(), held.fencing_token))
            command = inbox.get()
            resigning = time.monotonic()
        outbox.put(("resigned", name, resigning, time.monotonic()))
        if command == "stop":
            return


class Election:
    """The candidates of one resource."""

    def __init__(self, alias: str, resource: str) -> None:
        self.alias, self.resource = alias, resource
        self.outbox: Any = spawn.Queue()
        self.candidates: dict[str, tuple[Any, Any]] = {}  # name: (process, inbox)
        self.leader = ""
        self.started = 0
        self.unread: list[tuple[Any, ...]] = []  # messages read while looking for another kind

    def add_candidate(self) -> str:
        self.started += 1
        name = f"candidate-{self.started}"
        inbox = spawn.Queue()
        process = spawn.Process(
            target=campaign, args=(self.alias, self.resource, name, inbox, self.outbox), daemon=True
        )
        process.start()
        self.candidates[name] = (process, inbox)
        return name

    def next_message(self, kind: str) -> tuple[Any, ...]:
        """The first message of ``kind`` ("leading", "resigned") not read yet."""
        for message in self.unread:
            if message[0] == kind:
                self.unread.remove(message)
                return message
        while True:
            message = tuple(self.outbox.get(timeout=120))
            if message[0] == kind:
                return message
            self.unread.append(message)

    def wait_for_standby(self) -> None:
        """Until a candidate other than the leader is queued for the resource."""
        from django_dlock.models import LockWaiter

        waiters = LockWaiter.objects.using(self.alias).filter(resource=self.resource)
        deadline = time.monotonic() + 120
        while not waiters.exists():
            if time.monotonic() > deadline:
                raise RuntimeError("no candidate queued within 120 s")
            time.sleep(0.01)
        time.sleep(0.2)  # it is asleep on its wait, listening

    def start(self) -> None:
        self.add_candidate()
        _, self.leader, _, _ = self.next_message("leading")
        self.add_candidate()
        self.wait_for_standby()

    def resign(self) -> dict[str, float]:
        """The leader resigns: seconds from its resignation to the next term,
        and from its release returning."""
        _, inbox = self.candidates[self.leader]
        inbox.put("resign")
        _, elected, term, _ = self.next_message("leading")  # the standby's
        _, resigned, resigning, released = self.next_message("resigned")
        if resigned != self.leader or elected == self.leader:
            raise RuntimeError(f"{resigned} resigned and {elected} was elected; {self.leader} led")
        self.leader = elected
        self.wait_for_standby()  # the old leader campaigns again
        return {
            "from_resign_ms": (term - resigning) * 1000,
            "from_release_ms": (term - released) * 1000,
        }

    def kill(self) -> dict[str, float]:
        """SIGKILL the leader at a random moment of its renewal period: seconds
        from the kill to the next term, and from the lease's expiry."""
        from django_dlock.models import DistributedLock
        from django_dlock.rules.clock import database_now

        time.sleep(random.uniform(0, TTL / 3))
        [hold] = DistributedLock.objects.db_manager(self.alias).holders(self.resource)
        left = (hold.expires_at - database_now(self.alias)).total_seconds()
        process, _ = self.candidates.pop(self.leader)
        killed = time.monotonic()
        process.kill()
        _, name, term, _ = self.next_message("leading")
        process.join(10)
        self.leader = name
        self.add_candidate()
        self.wait_for_standby()
        return {
            "from_kill_s": term - killed,
            "lease_left_at_kill_s": left,
            "from_expiry_ms": (term - killed - left) * 1000,
        }

    def stop(self) -> None:
        for _, inbox in self.candidates.values():
            inbox.put("stop")
            inbox.put("stop")  # a standby elected meanwhile reads the second
        for process, _ in self.candidates.values():
            process.join(TTL + 10)
            if process.is_alive():
                process.kill()  # our own candidate, by its handle


def hand_over(alias: str, resigns: int, kills: int) -> dict[str, Any]:
    print(f"  kinds: {alias} leader hand-over", file=sys.stderr)
    election = Election(alias, f"leader:{alias}")
    try:
        election.start()
        resigned = [election.resign() for _ in range(resigns)]
        killed = [election.kill() for _ in range(kills)]
    finally:
        election.stop()
    after_resign = [sample["from_resign_ms"] for sample in resigned]
    return {
        "ttl_s": TTL,
        "resign_ms": after_resign,
        "resign_p50_ms": statistics.median(after_resign),
        "resign_max_ms": max(after_resign),
        "release_to_term_p50_ms": statistics.median(s["from_release_ms"] for s in resigned),
        "kill_s": [sample["from_kill_s"] for sample in killed],
        "kill_max_s": max(sample["from_kill_s"] for sample in killed),
        "kill_expiry_to_term_ms": [sample["from_expiry_ms"] for sample in killed],
    }
