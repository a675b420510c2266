"""Real task workers for tests and ``benchmarks.tasks``: a throwaway ``redis-server``,
Celery workers (``tests/workers_celery.py``) and django-tasks-db ``db_worker`` processes
(``tests/workers_tasks.py``), all against one database whose name they are given.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.utils import wait_for

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Redis:
    """A redis-server on a free loopback port, saving nothing."""

    def __init__(self, directory: Path) -> None:
        import redis

        server = shutil.which("redis-server")
        if server is None:
            raise FileNotFoundError("redis-server is not installed (scripts/test.sh installs it)")
        port = free_port()
        self.process = subprocess.Popen(
            [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
             "no", "--dir", str(directory)],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        self.url = f"redis://127.0.0.1:{port}/0"
        self.client = redis.Redis.from_url(self.url)

        def answers() -> bool:
            try:
                return bool(self.client.ping())
            except redis.ConnectionError:
                return False

        try:
            wait_for(answers, 20, "redis-server to answer")
        except BaseException:
            self.stop()
            raise

    def list(self, key: str) -> list[dict[str, Any]]:
        return [json.loads(raw) for raw in self.client.lrange(key, 0, -1)]

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)


class Processes:
    """Worker processes by name, each with its log file in ``log_dir``."""

    def __init__(self, log_dir: Path, database_name: str) -> None:
        self.log_dir = log_dir
        self.database_name = database_name
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def env(self, **extra: str) -> dict[str, str]:
        return {
            **os.environ,
            "DLOCK_TEST_DB_NAME": self.database_name,
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            **extra,
        }

    def log(self, name: str) -> str:
        path = self.log_dir / f"{name}.log"
        return path.read_text() if path.exists() else ""

    def logs(self) -> str:
        return "".join(self.log(name) for name in self.processes)

    def stop_all(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.terminate()
        for process in self.processes.values():
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(15)


class CeleryWorkers(Processes):
    """Celery worker processes, each on its queues, with one pool process or thread."""

    def __init__(self, log_dir: Path, database_name: str, broker_url: str) -> None:
        super().__init__(log_dir, database_name)
        self.broker_url = broker_url

    def start(
        self, name: str, queues: str = "celery", pool: str = "solo", concurrency: int = 1
    ) -> subprocess.Popen[bytes]:
        log = self.log_dir / f"{name}.log"
        process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "tests.workers_celery", "worker",
             f"--pool={pool}", f"--concurrency={concurrency}", "--loglevel=INFO",
             f"--hostname={name}@localhost", f"--queues={queues}", "--without-gossip",
             "--without-mingle", "--without-heartbeat", f"--logfile={log}"],
            cwd=ROOT, env=self.env(CELERY_BROKER_URL=self.broker_url),
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
        )  # fmt: skip
        self.processes[name] = process
        wait_for(lambda: "ready." in self.log(name), 60, f"worker {name}")
        return process


class DbWorkers(Processes):
    """django-tasks-db ``db_worker`` processes on the ``db`` task backend; each run of
    ``tests/workers_tasks.py`` appends a JSON line to ``runs_file``."""

    def __init__(self, log_dir: Path, database_name: str) -> None:
        super().__init__(log_dir, database_name)
        self.runs_file = log_dir / "runs.jsonl"

    def start(self, count: int, interval: float = 0.1) -> None:
        names = [f"db-worker-{len(self.processes) + number}" for number in range(count)]
        for name in names:
            with (self.log_dir / f"{name}.log").open("w") as log:
                self.processes[name] = subprocess.Popen(
                    [sys.executable, "-c", "from tests.workers_tasks import serve; serve()",
                     "--backend=db", f"--interval={interval}", "--no-startup-delay",
                     "--no-reload", f"--worker-id={name}-{os.getpid()}"],
                    cwd=ROOT, env=self.env(DLOCK_TEST_RUNS=str(self.runs_file)),
                    stdout=log, stderr=subprocess.STDOUT,
                )  # fmt: skip
        wait_for(lambda: all("Starting worker" in self.log(n) for n in names), 60, "db_worker")

    def runs(self, kind: str | None = None) -> list[dict[str, Any]]:
        if not self.runs_file.exists():
            return []
        entries = [json.loads(line) for line in self.runs_file.read_text().splitlines()]
        return [entry for entry in entries if kind is None or entry["kind"] == kind]


def overlaps(runs: list[dict[str, Any]], key: str = "key") -> list[tuple[float, float]]:
    """Each pair of runs of one ``key`` whose times overlap: (seconds of overlap, at)."""
    by_key: dict[str, list[dict[str, Any]]] = {}
    for entry in runs:
        by_key.setdefault(entry[key], []).append(entry)
    found: list[tuple[float, float]] = []
    for entries in by_key.values():
        entries.sort(key=lambda entry: entry["began"])
        for before, after in zip(entries, entries[1:], strict=False):
            if after["began"] < before["ended"]:
                found.append((before["ended"] - after["began"], after["began"]))
    return found


def finished(result: Any, seconds: float = 60) -> Any:
    """A django.tasks ``result`` once its task finished (refreshed from the database)."""

    def done() -> bool:
        result.refresh()
        return bool(result.is_finished)

    wait_for(done, seconds, f"task result {result.id}")
    return result
