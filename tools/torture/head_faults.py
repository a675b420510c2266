"""A fault of a waiter woken as the head of the queue, struck between the
release that woke it and its work (issue 46): on PostgreSQL and SQLite that
release granted it the lock for the short offer lease (``OFFER_LEASE``, 1 s)
and said so in the wake-up; on MariaDB it takes the lock itself once woken.

The window is milliseconds wide, too narrow for the runner to aim a signal
at, so a ``mix`` worker strikes itself there: its ``lock()`` wait reads the
wake-up in ``told_grant`` (``locking.waiting``; MariaDB's head returns from
``release_wait.pause`` at the holder's release), which this module wraps in
the worker's process only (no hook in the library). On a wake-up, with
``chance``, before or after the told grant is read, the process stops itself
(SIGSTOP, with a child that sends SIGCONT after a span shorter or longer
than the lease) or kills itself (SIGKILL; the runner starts another worker
in its place, ``Run.replace_killed``). Each strike is a ``fault`` event of
its own process (``scope``), written before it strikes: a paused head that
resumes after its lease lapsed must find its grant gone (the wait goes on,
or its hold is lost and its writes refused); the others wait a lease at
most. Nothing of the invariants is excused but what any fault of one
process excuses: its own waits' order (``check_priorities``) and its own
database errors (``report``, ``only_scope``)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
from typing import Any

from django_dlock.rules.grant import OFFER_LEASE
from tools.torture.history import Recorder, now

# The kinds of ``fault`` event, as the run's table counts them.
SHORT = "head stopped < lease"
LONG = "head stopped > lease"
KILLED = "head killed"
KINDS = (SHORT, LONG, KILLED)
# The spans of a stop (seconds): well within the lease, or well past it.
SHORT_SPAN = (0.1, 0.7)
LONG_SPAN = (1.4, 3.0)
# What a worker's strikes do in turn: a turn rather than a draw, so that even
# a short run has each (a kill costs a worker's start).
TURNS = (KILLED, SHORT, LONG, SHORT)


class HeadFaults:
    """Strikes of one worker process (``config``: ``chance`` per wake-up,
    ``every``: the fewest seconds between two strikes, ``kill``: whether it
    may kill itself)."""

    def __init__(self, recorder: Recorder, config: dict[str, Any]) -> None:
        self.recorder = recorder
        self.chance = float(config["chance"])
        self.every = float(config.get("every", 0))
        self.kill = bool(config.get("kill", True))
        self.rng = random.Random()
        self.next = 0.0
        # Where in ``TURNS`` it starts: the runner gives its workers each a
        # place (so that a short run kills one), a replacement a random one.
        self.turn = int(config.get("turn", self.rng.randrange(len(TURNS))))

    def install(self) -> None:
        from django_dlock.locking import release_wait, waiting

        # The name ``Wait`` calls, which that module imports from ``locking.told``.
        told_grant = getattr(waiting, "told_grant")  # noqa: B009
        pause = release_wait.pause

        def struck_told_grant(wait: Any) -> Any:
            if not self.due():
                return told_grant(wait)
            if self.rng.random() < 0.5:
                self.strike(wait, "before")
                return told_grant(wait)
            hold = told_grant(wait)
            self.strike(wait, "after" if hold is not None else "untold")
            return hold

        def struck_pause(wait: Any, seconds: float) -> None:
            # MariaDB's head blocks at the holder's gate until its release,
            # then takes the lock itself at once: strike before that take.
            gate, ends = wait.release_of is not None, now() + seconds
            pause(wait, seconds)
            released = gate and now() < ends and wait.unannounced is None
            if released and not wait.cancelled and self.due():
                self.strike(wait, "gate")

        setattr(waiting, "told_grant", struck_told_grant)  # noqa: B010
        release_wait.pause = struck_pause

    def due(self) -> bool:
        """Whether to strike at this wake-up."""
        return now() >= self.next and self.rng.random() < self.chance

    def strike(self, wait: Any, moment: str) -> None:
        """Stop or kill this process, after writing down what and when.
        ``moment``: before the told grant was read, after it was (a hold with
        its lease), or ``untold`` (no grant in the wake-up: MariaDB, a lease
        too old, a lock-delay)."""
        fields = {"scope": self.recorder.process, "only_scope": True, "moment": moment}
        fields |= {"resource": wait.claim.resource, "owner": wait.claim.owner}
        what = TURNS[self.turn % len(TURNS)]
        self.turn += 1
        t0 = now()
        if self.kill and what == KILLED:
            self.recorder.write("fault", kind=KILLED, t0=t0, t1=t0, **fields)
            self.recorder.write("killed", target=self.recorder.process, t=t0)
            os.kill(os.getpid(), signal.SIGKILL)
        span = self.rng.uniform(*(LONG_SPAN if what == LONG else SHORT_SPAN))
        waker = subprocess.Popen(["sh", "-c", f"sleep {span:.3f}; kill -CONT {os.getpid()}"])
        os.kill(os.getpid(), signal.SIGSTOP)
        t1 = now()
        waker.wait()
        kind = LONG if t1 - t0 > OFFER_LEASE else SHORT
        self.recorder.write("fault", kind=kind, t0=t0, t1=t1, span=round(t1 - t0, 3), **fields)
        self.next = t1 + self.every
