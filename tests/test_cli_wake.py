"""``dlock run``'s loop is woken by a ``Wake`` that its signal handler sets: a
``threading.Event`` set from a signal handler hangs for ever where the signal
came while the main thread was inside the event's own ``clear()`` or
``wait()`` (CI, 2026-12-06: ``dlock run`` never exited after SIGINT); and its loop
clears the wake before it looks, not after."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

from django_dlock.cli.run import StopSignals, _Holder
from django_dlock.cli.wake import Wake

ROOT = Path(__file__).resolve().parent.parent

# Signals every 0.2 ms for 1.5 s, each setting the wake, while the main thread
# clears it and looks at it in a loop.
STORM = """
import signal, sys, threading, time
from django_dlock.cli.wake import Wake
wake = Wake() if sys.argv[1] == "Wake" else threading.Event()
fired = 0
def handler(signum, frame):
    global fired
    fired += 1
    wake.set()
signal.signal(signal.SIGALRM, handler)
signal.setitimer(signal.ITIMER_REAL, 0.0002, 0.0002)
end = time.monotonic() + 1.5
while time.monotonic() < end:
    wake.clear()
    wake.wait(0.0)
signal.setitimer(signal.ITIMER_REAL, 0)
print(fired)
"""


def storm(kind: str) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(
            [sys.executable, "-c", STORM, kind],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=20,
        )
    except subprocess.TimeoutExpired:
        return None


def test_a_wake_set_by_signal_handlers_never_hangs_its_loop() -> None:
    done = storm("Wake")
    assert done is not None and done.returncode == 0, done and done.stderr[-2000:]
    assert int(done.stdout) > 100  # the handler ran, many times


class _Exited:
    """A ``ProcessGroup``'s ``exited`` whose CMD ends (its reaper sets ``exited``,
    then the wake) just after the loop's first look: the wake comes between that
    look and whatever the loop does next."""

    def __init__(self, wake: Wake) -> None:
        self.wake = wake
        self.ended = False
        self.looks = 0

    def is_set(self) -> bool:
        self.looks += 1
        if self.ended:
            return True
        self.ended = True
        self.wake.set()
        return False


def test_the_loop_sees_a_cmd_that_ended_between_its_look_and_its_wait() -> None:
    """A local run of the suite, 2026-12-06 (``sh -c 'kill -KILL $$'``, 60 s): the
    loop looked at ``exited``, the reaper set it and the wake, and the loop's
    ``clear()`` then dropped that wake: it slept until the lock's deadline, renewing
    it, for as long as the lock lived."""
    wake = Wake()
    group = SimpleNamespace(exited=_Exited(wake))
    held = SimpleNamespace(lost=threading.Event(), deadline=time.monotonic() + 30.0)
    holder = _Holder(held, None, wake, StopSignals(wake), print)  # type: ignore[arg-type]

    started = time.monotonic()
    holder._supervise(group)  # type: ignore[arg-type]

    assert time.monotonic() - started < 5.0
    assert group.exited.looks == 2
