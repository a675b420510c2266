"""One torture run against one database: its processes, its history, its end."""

from __future__ import annotations

import json
import os
import random
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tools.torture import guarded as guarded_writes
from tools.torture import store
from tools.torture.database import Server, sqlite_snapshot
from tools.torture.history import Recorder, load, now
from tools.torture.kinds import KindOperations

# Read-write locks: writers (exclusive), readers (shared), reentrant holds of
# either, upgrades and downgrades, and all-or-nothing sets of them.
RESOURCES = ["r0", "r1", "r2", "r3"]
# Semaphores, each with its one limit (another limit would be a mismatch).
SEMAPHORES = {"sem:2": 2, "sem:3": 3}
# What leaders campaign for.
LEADERS = ["leader"]
# Throttle keys, each with its one rate (another rate would count its uses anew).
THROTTLES = {"throttle:a": "3/2s", "throttle:b": "2/1s", "throttle:c": "5/3s"}
# Resources of once_per runs and of lock(min_hold=...), by their window (s);
# nobody else takes them, nor force-releases them.
ONCE_PER = {"once:a": 0.4, "once:b": 0.25}
MIN_HOLD = {"min-hold:a": 0.3}
# Waiters with priorities wait for this one (writers only); two processes take
# the pair in either order (the deadlock check refuses one).
PRIORITIES = "priority"
CROSSED = ["crossed:a", "crossed:b"]
VICTIM_RESOURCES = ["victim:kill", "victim:stop", "victim:renew", "victim:wait", "victim:ro"]
VICTIM_RESOURCES += ["victim:kill-shared", "victim:stop-shared", "victim:leader"]
SKEW_RESOURCES = ["skew:plus", "skew:minus"]
ROOT = Path(__file__).resolve().parents[2]


class Run:
    """The runner's side of a run: ``kind`` is "sqlite", "postgresql" or
    "mariadb"; ``url`` the lock database (Django's settings read it from the
    environment); ``server`` the server to strike (None for SQLite)."""

    def __init__(self, kind: str, directory: Path, url: str, server: Server | None) -> None:
        self.kind = kind
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.url = url
        self.server = server
        self.sqlite_file = url.removeprefix("sqlite:///") if kind == "sqlite" else None
        self.store_location = url if kind != "sqlite" else str(directory / "store.sqlite3")
        self.stop_file = directory / "stop"
        self.processes: dict[str, subprocess.Popen[str]] = {}
        self.faults: dict[str, int] = {}
        self.recorder = Recorder(directory / "runner.jsonl", "runner")
        self.operations: KindOperations | None = None
        self.failed_scenarios: list[str] = []
        self.spares = False  # prespawn the next victim after each use (more rounds follow)
        self._specs: dict[str, tuple[str, dict[str, Any], list[dict[str, Any]]]] = {}
        self.options: dict[str, dict[str, Any]] = {}  # each victim's options
        self._spawned: dict[str, int] = {}
        self._ready: dict[str, tuple[str, subprocess.Popen[str]]] = {}
        self.head_faults: dict[str, Any] | None = None
        self._replaced: set[str] = set()

    def prepare(self) -> None:
        """Create the lock table (migrate) and the guarded store; start the
        runner's own lock client (for take-overs)."""
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        guarded = RESOURCES + LEADERS + VICTIM_RESOURCES + SKEW_RESOURCES + [PRIORITIES, *CROSSED]
        store.create(self.store_location, guarded)
        guarded_writes.create(RESOURCES)
        the_store = store.open_store(self.store_location, "torture/runner/store")
        self.operations = KindOperations(self.recorder, the_store, random.Random())

    # -- processes -------------------------------------------------------------------

    def spawn(
        self, name: str, role: str, *, prefix: list[str] | None = None,
        env: dict[str, str] | None = None, wait_for_go: bool = False, **config: Any,
    ) -> subprocess.Popen[str]:  # fmt: skip
        """Start a worker process. With ``wait_for_go`` it starts Django and
        waits for ``go()`` before it begins (so that starting is not timed)."""
        history = self.directory / f"{name}.jsonl"
        config = {
            "name": name,
            "role": role,
            "history": str(history),
            "store": self.store_location,
            "sessions": str(self.directory),
            "stop_files": [str(self.stop_file), str(self.directory / f"{name}.stop")],
            "resources": RESOURCES,
            "semaphores": SEMAPHORES,
            "leaders": LEADERS,
            "throttles": THROTTLES,
            "once_per": ONCE_PER,
            "min_hold": MIN_HOLD,
            "priorities": PRIORITIES,
            "crossed": CROSSED,
            "wait_for_go": wait_for_go,
            **config,
        }
        command = [
            *(prefix or []),
            sys.executable,
            "-m",
            "tools.torture.worker",
            json.dumps(config),
        ]
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            env={**os.environ, "TORTURE_DATABASE_URL": self.url, **(env or {})},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.processes[name] = process
        return process

    def prespawn(
        self,
        base: str,
        role: str,
        *,
        rotation: list[dict[str, Any]] | None = None,
        **options: Any,
    ) -> None:
        """Start the next process for ``victim(base)``, waiting for its go. With
        ``rotation``, the successive processes take its options in turn (a
        victim of another kind of hold each round)."""
        self._specs[base] = (role, options, rotation or [{}])
        self._spawned[base] = self._spawned.get(base, 0) + 1
        name = f"{base}-{self._spawned[base]}"
        turn = rotation[(self._spawned[base] - 1) % len(rotation)] if rotation else {}
        self.options[name] = options | turn
        self._ready[base] = (name, self.spawn(name, role, wait_for_go=True, **options, **turn))

    def victim(self, base: str) -> tuple[str, subprocess.Popen[str]]:
        """The process prespawned for ``base``, told to go; a spare is started
        for the next round when the run has more rounds."""
        name, process = self._ready.pop(base)
        assert process.stdin is not None
        process.stdin.write("go\n")
        process.stdin.flush()
        if self.spares:
            role, options, rotation = self._specs[base]
            self.prespawn(base, role, rotation=rotation, **options)
        return name, process

    def expect(self, process: subprocess.Popen[str], word: str, timeout: float = 60) -> bool:
        """Wait until the process says ``word`` on stdout (or ends)."""
        end = time.monotonic() + timeout
        assert process.stdout is not None
        # poll, not select: a long run's descriptors pass select's limit of 1024.
        poller = select.poll()
        poller.register(process.stdout, select.POLLIN)
        while time.monotonic() < end:
            if poller.poll(500):
                line = process.stdout.readline()
                if not line:
                    return False
                if line.strip() == word:
                    return True
        return False

    def kill(self, name: str, sig: signal.Signals = signal.SIGKILL) -> float:
        process = self.processes[name]
        t = now()
        process.send_signal(sig)
        if sig == signal.SIGKILL:
            if process.stdin:
                process.stdin.close()
            process.wait()
            self.recorder.write("killed", target=name, t=t)
        return t

    def finish(self, process: subprocess.Popen[str], timeout: float = 120) -> None:
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        for pipe in (process.stdin, process.stdout):
            if pipe is not None:
                pipe.close()  # (each round's victims would keep theirs open)

    def start_workers(self, count: int, head_faults: dict[str, Any] | None = None) -> None:
        """Start ``count`` mix workers; all but ``w0`` (whose session the
        terminate scenario ends) strike themselves as heads (``head_faults``)."""
        self.head_faults = head_faults
        for n in range(count):
            faults = head_faults and n and head_faults | {"turn": n + 3}  # w1, w5 kill first
            self.spawn(f"w{n}", "mix", head_faults=faults or None)

    def replace_killed(self) -> None:
        """Start a mix worker in the place of each that killed itself as a
        head (``head_faults``), so that the load goes on."""
        for name, process in list(self.processes.items()):
            worker = re.fullmatch(r"(w\d+)(?:-(\d+))?", name)  # w3, then w3-2, w3-3...
            if worker and process.poll() == -9 and name not in self._replaced:
                self._replaced.add(name)
                base, n = worker[1], int(worker[2] or 1) + 1
                self.spawn(f"{base}-{n}", "mix", head_faults=self.head_faults)

    def stop_workers(self) -> None:
        self.stop_file.touch()
        for _, spare in self._ready.values():
            assert spare.stdin is not None
            spare.stdin.close()  # an unused victim ends without starting
        self._ready.clear()
        for process in self.processes.values():
            self.finish(process)

    # -- observations ----------------------------------------------------------------

    def fault(self, kind: str, t0: float, t1: float, **fields: Any) -> None:
        self.faults[kind] = self.faults.get(kind, 0) + 1
        self.recorder.write("fault", kind=kind, t0=t0, t1=t1, **fields)

    def snapshot(self) -> None:
        t0 = now()
        if self.server is not None:
            db_now, rows, holds = self.server.snapshot(self.url)
        else:
            assert self.sqlite_file is not None
            db_now, rows, holds = sqlite_snapshot(self.sqlite_file)
        self.recorder.write("snapshot", t0=t0, t1=now(), now=db_now, rows=rows, holds=holds)

    def close(self) -> list[dict[str, Any]]:
        """Stop everything, record the store's final state, and return the history."""
        self.stop_workers()
        self.snapshot()
        self.recorder.write("store_final", **store.dump(self.store_location))
        self.recorder.write("guarded_final", **guarded_writes.dump())
        return load(sorted(self.directory.glob("*.jsonl")))
