"""The test project as a real server process serves it, pointed at the test
database of the pytest process that started it (``DLOCK_SERVER_DATABASE_NAME``).

    gunicorn 'tests.api_servers:wsgi()'
    uvicorn --factory tests.api_servers:asgi
"""

from __future__ import annotations

import os
from typing import Any


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
