"""CMD of ``dlock run`` in a process group of its own, signalled and stopped as one.

``consul lock`` killed ``/bin/sh`` and left its child running (consul#2022):
signals here go to CMD's whole process group, so a shell's children and their
children get them too, as a terminal's Ctrl-C would.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence

from django_dlock.cli.wake import Wake

__all__ = ["ProcessGroup"]

# How often a stop looks whether the group is gone, in seconds.
STOP_LOOKS = 0.02


class ProcessGroup:
    """``argv`` started as the leader of a new session and process group.

    A thread waits for the leader and sets ``exited`` (and ``wake``, to wake the
    caller's loop) when it ends.
    """

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], wake: Wake) -> None:
        # A new session: the group is CMD's alone (its pgid is its pid), and a
        # terminal's signals reach it only through dlock, which forwards them.
        self.process = subprocess.Popen(argv, env=env, start_new_session=True)  # noqa: S603 - the operator's command
        self.pgid = self.process.pid
        self.exited = threading.Event()
        self._wake = wake
        threading.Thread(target=self._reap, name="dlock run: CMD", daemon=True).start()

    def _reap(self) -> None:
        self.process.wait()
        self.exited.set()
        self._wake.set()

    @property
    def exit_status(self) -> int:
        """The leader's exit status as a shell gives it: 128 + N when signal N ended it."""
        returncode = self.process.wait()
        return 128 - returncode if returncode < 0 else returncode

    def signal(self, signum: int) -> None:
        """Send ``signum`` to every process of the group."""
        with contextlib.suppress(ProcessLookupError):  # the group is gone already
            os.killpg(self.pgid, signum)

    def alive(self) -> bool:
        """Whether some process of the group still runs (a zombie does not count)."""
        return _group_alive(self.pgid)

    def stop(self, kill_after: float) -> None:
        """SIGTERM to the whole group at once; SIGKILL to what is left of it after
        ``kill_after`` seconds. Returns once the group is gone (or killed)."""
        self.signal(signal.SIGTERM)
        deadline = time.monotonic() + kill_after
        while self.alive():
            if time.monotonic() >= deadline:
                self.signal(signal.SIGKILL)
                break
            time.sleep(STOP_LOOKS)
        # Killed, the leader ends at once (unless stuck in the kernel: then
        # waiting longer would not help).
        self.exited.wait(max(kill_after, 1.0))


def _group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` runs. On Linux /proc tells zombies
    apart: an orphan that ended waits there for an init that may never reap
    it (a container's), and it must not hold the stop up. Elsewhere, whether
    the group can be signalled at all."""
    try:
        pids = [name for name in os.listdir("/proc") if name.isdigit()]
    except FileNotFoundError:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        return True
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue  # ended meanwhile
        # After the command's name: state, ppid, pgrp.
        if int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            return True
    return False
