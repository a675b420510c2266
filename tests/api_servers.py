"""Real servers for the API tests, each a process of its own that the test
starts and stops: gunicorn (WSGI) and uvicorn (ASGI).

The apps here are the test project pointed at the test database of the pytest
process that started them (``DLOCK_SERVER_DATABASE_NAME``)::

    gunicorn 'tests.api_servers:wsgi()'
    uvicorn --factory tests.api_servers:asgi
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

# The test project, as each server loads it.
TEST_APPS = {"gunicorn": "tests.api_servers:wsgi()", "uvicorn": "tests.api_servers:asgi"}


def _configure() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    from django.conf import settings

    name = os.environ.get("DLOCK_SERVER_DATABASE_NAME")
    if name:
        for alias in settings.DATABASES:
            settings.DATABASES[alias]["NAME"] = name
    settings.ALLOWED_HOSTS = ["127.0.0.1", "localhost"]


def wsgi() -> Any:
    _configure()
    from django.core.wsgi import get_wsgi_application

    return get_wsgi_application()


def asgi() -> Any:
    _configure()
    from django.core.asgi import get_asgi_application

    return get_asgi_application()


def _command(server: str, app: str, fd: int) -> list[str]:
    if server == "gunicorn":
        return [
            *(sys.executable, "-m", "gunicorn", "--bind", f"fd://{fd}", "--workers", "1"),
            *("--log-level", "warning", app),
        ]
    if server == "uvicorn":
        factory = ["--factory"] if app == TEST_APPS["uvicorn"] else []
        return [
            *(sys.executable, "-m", "uvicorn", "--fd", str(fd), *factory, "--lifespan", "off"),
            *("--log-level", "warning", app),
        ]
    raise ValueError(server)


@contextmanager
def serving(server: str, app: str, env: Mapping[str, str], log: Path) -> Iterator[int]:
    """Run ``app`` under ``server`` (``"gunicorn"`` or ``"uvicorn"``) on a port of
    127.0.0.1, which it yields; stop it on the way out, and fail if its log
    shows a traceback."""
    # The test binds the socket and hands it over: no port to guess, and
    # connections wait in its backlog until the server is up.
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    with log.open("w") as output:
        process = subprocess.Popen(
            _command(server, app, listener.fileno()),
            pass_fds=(listener.fileno(),),
            cwd=ROOT,
            env=dict(env),
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield listener.getsockname()[1]
    finally:
        listener.close()
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    assert "Traceback" not in log.read_text(), log.read_text()
