"""The Debian packages the cluster runs, installed when missing."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tools.cluster.processes import say

# command the harness runs -> the Debian package that provides it
COMMANDS = {
    "patroni": "patroni",
    "etcd": "etcd-server",
    "etcdctl": "etcd-client",
    "haproxy": "haproxy",
    "pgbouncer": "pgbouncer",
}
SEARCH_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin", "/usr/bin"])


class ClusterSetupError(RuntimeError):
    """The cluster cannot run on this machine; the message says why."""


def command_path(name: str) -> str | None:
    return shutil.which(name, path=SEARCH_PATH)


def ensure_packages() -> None:
    """Install (apt-get) the packages whose commands are missing, saying so."""
    if os.geteuid() != 0:
        raise ClusterSetupError(
            "the cluster harness needs root (network namespaces, the postgres user)"
        )
    missing = sorted({package for cmd, package in COMMANDS.items() if command_path(cmd) is None})
    if not missing:
        return
    say(f"cluster: installing Debian packages {' '.join(missing)} (apt-get)", error=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    # The packages' own services (etcd on 2379, haproxy, pgbouncer on 6432) must not
    # start on install: the harness runs its own, on ports of its choosing.
    policy = Path("/usr/sbin/policy-rc.d")
    ours = not policy.exists()
    if ours:
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
    try:
        for args in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *missing]):
            done = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise ClusterSetupError(
                    f"could not install {' '.join(missing)}: {' '.join(args)} failed:\n"
                    f"{done.stderr.strip()[-2000:]}"
                )
    finally:
        if ours:
            policy.unlink()
    still = [cmd for cmd in COMMANDS if command_path(cmd) is None]
    if still:
        raise ClusterSetupError(f"installed, yet still missing: {', '.join(still)}")
