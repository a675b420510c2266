"""The system checks of a PostgreSQL lock database: it must be the primary, and
it must not forget what it confirmed.

A replica refuses writes (every lock operation would raise) and, read directly,
lags behind the primary: a lock could look free that is held. With
``synchronous_commit = off`` PostgreSQL confirms a commit before its WAL is on
disk, and with ``fsync = off`` it never makes sure it is: a crash (even an
immediate shutdown, with synchronous_commit off) can then forget granted locks,
and the next owner gets a lock that is still held, with a fencing token that
was already handed out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.core.checks import CheckMessage, Error, Warning

from django_dlock.backends.checks import BackendChecks

if TYPE_CHECKING:
    from django.db.backends.utils import CursorWrapper

RISK = (
    "a crash can forget locks it has already granted: two owners then hold the same "
    "lock, and fencing tokens are issued twice"
)


class PostgreSQLChecks(BackendChecks):
    def check_server(self, cursor: CursorWrapper) -> list[CheckMessage]:
        messages = super().check_server(cursor)
        alias = self.alias
        cursor.execute(
            "SELECT pg_is_in_recovery(), current_setting('synchronous_commit'), "
            "current_setting('fsync')"
        )
        in_recovery, synchronous_commit, fsync = cursor.fetchone()
        if in_recovery:
            messages.append(
                Error(
                    f"DLOCK_DATABASE {alias!r} is a PostgreSQL replica (pg_is_in_recovery() is "
                    "true): it refuses lock writes, and its reads lag behind the primary.",
                    hint="Point DLOCK_DATABASE at an alias of the primary (or of a pooler or "
                    "proxy that routes to the primary).",
                    id="django_dlock.E402",
                )
            )
        if synchronous_commit == "off":
            messages.append(
                Warning(
                    f"DLOCK_DATABASE {alias!r} runs with synchronous_commit = off: {RISK}.",
                    hint="Leave synchronous_commit at its default (on) for the lock database, "
                    "e.g. ALTER ROLE <lock user> SET synchronous_commit = on.",
                    id="django_dlock.W010",
                )
            )
        if fsync == "off":
            messages.append(
                Warning(
                    f"DLOCK_DATABASE {alias!r} runs with fsync = off: {RISK}.",
                    hint="Turn fsync on (postgresql.conf); it is on by default.",
                    id="django_dlock.W011",
                )
            )
        return messages
