"""App processes in the app hosts' namespaces: the lock load and one-off probes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from tools.cluster import processes
from tools.cluster.cluster import Cluster
from tools.cluster.netns import AppHost

REPOSITORY = Path(__file__).resolve().parents[2]
SETTINGS = "tools.cluster.settings_pgbouncer"


def app_env(database_url: str) -> dict[str, str]:
    return {
        **os.environ,
        "DATABASE_URL": database_url,
        "DJANGO_SETTINGS_MODULE": SETTINGS,
        "PYTHONPATH": str(REPOSITORY),
    }


def migrate(cluster: Cluster) -> None:
    """Create the tables (the test settings' apps) in the apps' database,
    directly on the leader."""
    subprocess.run(
        [sys.executable, "-m", "django", "migrate", "--noinput", "-v0"],
        env=app_env(cluster.primary_url()),
        cwd=REPOSITORY,
        check=True,
        timeout=300,
    )


def probe(cluster: Cluster, *args: str, host: AppHost | None = None) -> Any:
    """Run ``tools.cluster.probe`` (through PgBouncer, from ``host`` if given)."""
    command = [sys.executable, "-m", "tools.cluster.probe", *args]
    done = subprocess.run(
        host.command(command) if host else command,
        env=app_env(cluster.pgbouncer_url(host)),
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(done.stdout)


@dataclass
class Load:
    """``tools.cluster.load`` processes spread over the app hosts."""

    cluster: Cluster
    directory: Path
    per_host: int = 2
    resources: list[str] = field(default_factory=lambda: ["fo:a", "fo:b", "fo:c"])
    ttl: float = 8
    pids: list[int] = field(default_factory=list)

    @property
    def stop_file(self) -> Path:
        return self.directory / "stop"

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.stop_file.unlink(missing_ok=True)
        for host in self.cluster.hosts:
            for index in range(self.per_host):
                name = f"{host.namespace}.{index}"
                command = [
                    sys.executable,
                    "-m",
                    "tools.cluster.load",
                    f"--process={name}",
                    f"--resources={','.join(self.resources)}",
                    f"--ttl={self.ttl}",
                    f"--stop-file={self.stop_file}",
                    f"--out={self.directory / (name + '.jsonl')}",
                ]
                with (self.directory / f"{name}.log").open("ab") as log:
                    process = subprocess.Popen(  # the harness's own command
                        host.command(command),
                        env=app_env(self.cluster.pgbouncer_url(host)),
                        cwd=REPOSITORY,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                self.pids.append(process.pid)

    def wait_running(self, timeout: float = 60) -> None:
        """Until every process has completed a call."""

        def all_started() -> bool:
            files = list(self.directory.glob("*.jsonl"))
            return len(files) == len(self.pids) and all(f.stat().st_size for f in files)

        if not processes.wait_for(all_started, timeout):
            raise RuntimeError(f"the load did not start; see {self.directory}/*.log")

    def stop(self) -> list[Path]:
        self.stop_file.touch()
        deadline = time.monotonic() + 30
        for pid in self.pids:
            processes.wait_for(partial(_exited, pid), deadline - time.monotonic())
            processes.stop(pid, timeout=5)
        self.pids.clear()
        return sorted(self.directory.glob("*.jsonl"))


def _exited(pid: int) -> bool:
    return not processes.alive(pid)
