"""The system checks of a lock backend's database, asked through ``LockBackend.check()``.

As Django asks each connection (``connection.validation.check()``) and
django.tasks each task backend (``backend.check()``), ``django_dlock.checks``
asks the backend of ``DLOCK_DATABASE``. Each vendor subclasses ``BackendChecks``
in ``backends/<vendor>/checks.py``: what its settings allow (every ``manage.py
check``), and what its server answers (only where Django lets checks use the
database: ``manage.py check --database ALIAS``, ``migrate``).
"""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from django.core.checks import CheckMessage, Error, Warning
from django.db import DatabaseError, connections

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper
    from django.db.backends.utils import CursorWrapper


class BackendChecks:
    """The checks every database gets; a vendor's subclass adds its own. Made
    with the alias only, so that the backends' modules and this one do not
    import each other."""

    def __init__(self, alias: str) -> None:
        self.alias = alias

    @property
    def connection(self) -> BaseDatabaseWrapper:
        return connections[self.alias]

    @property
    def settings_dict(self) -> dict[str, Any]:
        """``DATABASES[alias]`` as the connection has it (with Django's defaults)."""
        return self.connection.settings_dict

    @property
    def options(self) -> dict[str, Any]:
        return self.settings_dict.get("OPTIONS") or {}

    def check(
        self, *, databases: Collection[str] | None = None, **kwargs: Any
    ) -> list[CheckMessage]:
        """The settings' messages, then the server's when ``databases`` (Django's
        check argument) names this alias. A server that cannot be reached is one
        warning, the same on every vendor, and no traceback; a query that fails
        on a server that answered raises, as a fault the checks must not hide."""
        messages = self.check_settings()
        if self.alias not in (databases or ()):
            return messages
        connection = self.connection
        try:
            connection.ensure_connection()
        except DatabaseError as error:
            return [*messages, self._unreachable(error)]
        with connection.cursor() as cursor:
            messages.extend(self.check_server(cursor))
        return messages

    def check_settings(self) -> list[CheckMessage]:
        """What the settings alone tell, without a query."""
        mirror = (self.settings_dict.get("TEST") or {}).get("MIRROR")
        if not mirror:
            return []
        # TEST["MIRROR"] is how Django's test runner is told that an alias is a replica.
        return [
            Error(
                f"DLOCK_DATABASE {self.alias!r} is a replica of {mirror!r} (its TEST['MIRROR']): "
                "locks must be written to and read from the primary.",
                hint=f"Set DLOCK_DATABASE to {mirror!r}, or to an alias of the primary.",
                id="django_dlock.E401",
            )
        ]

    def check_server(self, cursor: CursorWrapper) -> list[CheckMessage]:
        """What the server answers, asked with ``cursor``."""
        return []

    def _unreachable(self, error: DatabaseError) -> Warning:
        # The first line: drivers add hints on the next ones ("Is the server running...").
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        return Warning(
            f"DLOCK_DATABASE {self.alias!r} could not be reached, so the checks that ask "
            f"its server did not run: {reason}",
            hint=f"Start the database server, or correct DATABASES[{self.alias!r}] (NAME, "
            f"HOST, PORT, USER); then run manage.py check --database {self.alias}.",
            id="django_dlock.W005",
        )


def is_seconds(value: object) -> bool:
    """Whether a setting's ``value`` is a number of seconds greater than 0 (a bool is not)."""
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )
