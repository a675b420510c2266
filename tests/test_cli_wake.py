"""``dlock run``'s loop is woken by a ``Wake`` that its signal handler sets: a
``threading.Event`` set from a signal handler hangs for ever where the signal
came while the main thread was inside the event's own ``clear()`` or
``wait()`` (CI, 2026-12-06: ``dlock run`` never exited after SIGINT)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
