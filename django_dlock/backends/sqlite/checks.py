"""The system checks of a SQLite lock database: its SQLite, its file and its waits."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from django.core.checks import CheckMessage, Error, Warning

from django_dlock.backends.checks import BackendChecks, is_seconds

if TYPE_CHECKING:
    from django.db.backends.sqlite3.base import DatabaseWrapper

# UPDATE ... RETURNING and DELETE ... RETURNING, which the lock operations use.
MIN_SQLITE_VERSION = (3, 35, 0)

# SQLite waits this long (seconds) for another process's write lock before it
# raises "database is locked"; below it, ordinary contention surfaces as errors.
MIN_SQLITE_TIMEOUT = 5


class SQLiteChecks(BackendChecks):
    def check_settings(self) -> list[CheckMessage]:
        messages = super().check_settings()
        alias = self.alias
        connection = cast("DatabaseWrapper", self.connection)
        version = connection.Database.sqlite_version_info
        if version < MIN_SQLITE_VERSION:
            messages.append(
                Error(
                    f"DLOCK_DATABASE {alias!r} is SQLite {'.'.join(map(str, version))}; "
                    "django-dlock's lock operations need 3.35 or later (RETURNING).",
                    hint="Run Django with a Python whose sqlite3 module is built against "
                    "SQLite 3.35 or later (python -c 'import sqlite3; "
                    "print(sqlite3.sqlite_version)' tells).",
                    id="django_dlock.E007",
                )
            )
        if connection.is_in_memory_db():
            messages.append(
                Error(
                    f"DLOCK_DATABASE {alias!r} is an in-memory SQLite database, which no "
                    "other process can see: its locks exclude nobody.",
                    hint="Give the database a file NAME.",
                    id="django_dlock.E005",
                )
            )
        mode = str(self.options.get("transaction_mode") or "DEFERRED").upper()
        if mode not in ("IMMEDIATE", "EXCLUSIVE"):
            messages.append(
                Warning(
                    f"DATABASES[{alias!r}] is SQLite with {mode} transactions: two processes "
                    "that read and then write at once fail with 'database is locked' "
                    "(django-dlock's own operations always use BEGIN IMMEDIATE).",
                    hint=f"Set DATABASES[{alias!r}]['OPTIONS']['transaction_mode'] = 'IMMEDIATE'.",
                    id="django_dlock.W001",
                )
            )
        timeout = self.options.get("timeout", 5)
        if not is_seconds(timeout) or timeout < MIN_SQLITE_TIMEOUT:
            messages.append(
                Warning(
                    f"DATABASES[{alias!r}] is SQLite with a busy timeout of {timeout!r} s: "
                    "lock operations waiting for another process's write fail with "
                    "'database is locked' after that long.",
                    hint=f"Set DATABASES[{alias!r}]['OPTIONS']['timeout'] to "
                    f"{MIN_SQLITE_TIMEOUT} or more.",
                    id="django_dlock.W002",
                )
            )
        return messages
