"""A real PgBouncer on loopback in front of the test database's server."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from django.db import connection


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def pgbouncer(pool_mode: str = "transaction") -> Iterator[dict[str, Any]]:
    """Run PgBouncer in ``pool_mode``; yields the settings a worker process
    needs to reach the test database through it (see ``setup_worker``).
    Stopped by its process id when the block ends."""
    binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
    if not os.path.exists(binary):
        pytest.skip("pgbouncer is not installed (apt-get install pgbouncer)")
    server = connection.settings_dict
    directory = Path(tempfile.mkdtemp(prefix="dlock-pgbouncer-"))
    port = _free_port()
    user = server["USER"] or "postgres"
    (directory / "users.txt").write_text(f'"{user}" "{server["PASSWORD"] or ""}"\n')
    (directory / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"* = host={server['HOST'] or '127.0.0.1'} port={server['PORT'] or 5432}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {directory / 'users.txt'}\n"
        f"pool_mode = {pool_mode}\ndefault_pool_size = 5\nmax_client_conn = 200\n"
        f"logfile = {directory / 'pgbouncer.log'}\n"
    )
    command = [binary, str(directory / "pgbouncer.ini")]
    if os.geteuid() == 0:  # PgBouncer refuses to run as root: it switches user itself
        shutil.chown(directory, "postgres")
        for child in directory.iterdir():
            shutil.chown(child, "postgres")
        command[1:1] = ["-u", "postgres"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    log = directory / "pgbouncer.log"
                    details = log.read_text() if log.exists() else ""
                    raise RuntimeError(f"pgbouncer did not start: {details}") from None
                time.sleep(0.05)
        yield {"NAME": server["NAME"], "HOST": "127.0.0.1", "PORT": str(port)}
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        shutil.rmtree(directory, ignore_errors=True)
