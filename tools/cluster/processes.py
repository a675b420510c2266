"""Starting the cluster's servers as the postgres user and stopping them by PID."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

SERVICE_USER = "postgres"


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports free to listen on, below the kernel's range of
    ephemeral ports. (A port that ``bind`` to port 0 picks is in that range,
    and the outgoing connection of a server started meanwhile may take it
    before the server meant to listen on it starts: a Patroni node's
    PostgreSQL once found its port in use for the whole two minutes of its
    start.)"""
    low = _ephemeral_low()
    below = range(max(1024, low - 12000), low)
    candidates = random.sample(below, min(1000, len(below)))
    ports: list[int] = []
    for port in candidates:
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        ports.append(port)
        if len(ports) == count:
            return ports
    raise RuntimeError(f"no {count} free ports below {low}")


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux: 32768 unless set)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def chown_to_service_user(path: Path) -> None:
    subprocess.run(["chown", "-R", f"{SERVICE_USER}:", str(path)], check=True)


def start(args: Sequence[str], log: Path, *, as_service_user: bool = True) -> int:
    """Start a server in a session of its own, its output going to ``log``;
    returns its PID. It keeps running when the harness's process exits."""
    with log.open("ab") as out:
        process = subprocess.Popen(
            list(args),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            user=SERVICE_USER if as_service_user else None,
            cwd=log.parent,
        )
    return process.pid


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A child of this process that exited stays a zombie until reaped.
    try:
        reaped, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return _not_zombie(pid)
    return reaped == 0


def _not_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def stop(pid: int, *, timeout: float = 20, sig: signal.Signals = signal.SIGTERM) -> None:
    """Send ``sig`` to the process ``pid``; SIGKILL it if it outlives ``timeout``."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return
    if not wait_for(lambda: not alive(pid), timeout):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        wait_for(lambda: not alive(pid), 5)


def wait_for(condition: Callable[[], bool], timeout: float, interval: float = 0.1) -> bool:
    """Poll ``condition`` until it holds or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def say(text: str, *, error: bool = False) -> None:
    """A line for the person running the harness (stdout, or stderr)."""
    (sys.stderr if error else sys.stdout).write(text + "\n")
