"""A process of tests/test_once.py: ``python -m tests.workers_once ROLE CONFIG_JSON``.

It starts Django on the test database (``CONFIG["db"]``), says ``ready`` on
stdout, waits for ``go`` on stdin, plays ``ROLE`` and prints one JSON line of
what it saw, with database times as ISO strings. Run under ``faketime`` too:
it never calls ``time.sleep`` (which fails with EINVAL under libfaketime when
the monotonic clock is left alone, as these runs have it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from tests.utils import WORKER_TIMEOUT, setup_worker

_NEVER = threading.Event()


def acquired_at(resource: str) -> str:
    """The database's time of the acquisition of ``resource``'s lock held now."""
    from django_dlock.models import DistributedLock

    row = DistributedLock.objects.filter(resource=resource).values_list("acquired_at", flat=True)
    return row.get().isoformat()


def once(config: dict[str, Any]) -> dict[str, Any]:
    """Call ``once_per(resource, every)`` every 50 ms for ``seconds``; the runs."""
    from django_dlock import once_per

    runs = []
    end = time.monotonic() + config["seconds"]
    while time.monotonic() < end:
        with once_per(config["resource"], every=config["every"]) as due:
            if due:
                runs.append(acquired_at(config["resource"]))
        _NEVER.wait(0.05)
    return {"runs": runs}


def min_hold(config: dict[str, Any]) -> dict[str, Any]:
    """Enter ``lock(resource, min_hold=...)``, leave at once; how long the exit took."""
    from django_dlock import lock

    with lock(config["resource"], min_hold=config["min_hold"]):
        taken = acquired_at(config["resource"])
        leaving = time.monotonic()
    return {"acquired_at": taken, "exit_seconds": time.monotonic() - leaving}


ROLES = {"once": once, "min_hold": min_hold}


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main() -> None:
    role, config = sys.argv[1], json.loads(sys.argv[2])
    setup_worker(config["db"])
    from django.db import connection

    connection.ensure_connection()
    say("ready")
    if sys.stdin.readline().strip() != "go":
        return
    result = ROLES[role](config)
    result["wall_clock"] = time.time()  # the process's own clock: faketime's shows
    say(json.dumps(result))


if __name__ == "__main__":
    main()


# -- the test's side ----------------------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent
# The process's clock is faked, its monotonic clock is not (as the torture run has it).
FAKETIME_ENV = {"FAKETIME_DONT_FAKE_MONOTONIC": "1"}


def run_workers(role: str, workers: list[tuple[list[str], dict[str, Any]]]) -> list[dict[str, Any]]:
    """Start one process per (command prefix, config) of ``workers`` playing
    ``role``, let them go together once all are ready, and return what each saw."""
    processes = [
        subprocess.Popen(
            [*prefix, sys.executable, "-m", "tests.workers_once", role, json.dumps(config)],
            cwd=ROOT,
            env={**os.environ, **FAKETIME_ENV},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for prefix, config in workers
    ]
    try:
        for process in processes:
            assert process.stdout is not None and process.stdin is not None
            assert process.stdout.readline().strip() == "ready", "a worker did not start"
        for process in processes:
            assert process.stdin is not None
            process.stdin.write("go\n")
            process.stdin.flush()
        results = []
        for process in processes:
            out, _ = process.communicate(timeout=WORKER_TIMEOUT)
            assert process.returncode == 0, f"a worker failed: {out}"
            results.append(json.loads(out.splitlines()[-1]))
        return results
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
