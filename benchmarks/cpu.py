"""CPU time of server processes, from /proc (Linux), in seconds."""

from __future__ import annotations

import os
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, user + system CPU seconds) of ``pid``; None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    # After the command: state, ppid, ... utime is field 14 of the whole line.
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICK


def parent_of(pid: int) -> int:
    stat = _stat(pid)
    if stat is None:
        raise ProcessLookupError(pid)
    return stat[0]


def tree_cpu(root: int) -> float:
    """CPU seconds of ``root`` and its direct children (a postmaster and its
    backends and background workers, or a redis-server)."""
    total = 0.0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        stat = _stat(int(entry.name))
        if stat is not None and (int(entry.name) == root or stat[0] == root):
            total += stat[1]
    return total
