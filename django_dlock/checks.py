from __future__ import annotations

import difflib
import math
from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning
from django.db import connections

from django_dlock.backends import BACKENDS
from django_dlock.checks_mysql import check_mysql_settings
from django_dlock.conf import Settings, conf

# A ttl beyond this would push expires_at past what a datetime can hold.
LONGEST_TTL = 100 * 365 * 86400

# SQLite waits this long (seconds) for another process's write lock before it
# raises "database is locked"; below it, ordinary contention surfaces as errors.
MIN_SQLITE_TIMEOUT = 5


def _is_seconds(value: object) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


def _not_seconds(name: str, value: object, example: str, id_: str) -> Error:
    return Error(
        f"{name} must be a number of seconds greater than 0, not {value!r}.",
        hint=f"Set it to, for example, {example}.",
        id=f"django_dlock.{id_}",
    )


def check_settings(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """Validate every ``DLOCK_*`` setting and the lock database's configuration."""
    errors: list[CheckMessage] = []
    default_ttl, max_ttl = conf.DEFAULT_TTL, conf.MAX_TTL
    if not _is_seconds(default_ttl):
        errors.append(_not_seconds("DLOCK_DEFAULT_TTL", default_ttl, "60", "E001"))
    if not _is_seconds(max_ttl) or max_ttl > LONGEST_TTL:
        errors.append(
            Error(
                f"DLOCK_MAX_TTL must be a number of seconds greater than 0 and at most "
                f"{LONGEST_TTL} (100 years), not {max_ttl!r}.",
                hint="Set it to, for example, 86400 (a day).",
                id="django_dlock.E002",
            )
        )
    if not errors and default_ttl > max_ttl:
        errors.append(
            Error(
                f"DLOCK_DEFAULT_TTL ({default_ttl!r}) is larger than DLOCK_MAX_TTL ({max_ttl!r}).",
                hint="Lower DLOCK_DEFAULT_TTL or raise DLOCK_MAX_TTL.",
                id="django_dlock.E003",
            )
        )
    errors.extend(_check_backoff())
    known = {
        f"DLOCK_{name}" for name, value in vars(Settings).items() if isinstance(value, property)
    }
    for name in sorted(n for n in dir(settings) if n.startswith("DLOCK_") and n not in known):
        close = difflib.get_close_matches(name, known, n=1)
        errors.append(
            Warning(
                f"{name} is not a django-dlock setting; it has no effect.",
                hint=f"Did you mean {close[0]}?" if close else "See the README's Settings.",
                id="django_dlock.W004",
            )
        )
    alias = conf.DATABASE
    if not isinstance(alias, str) or alias not in settings.DATABASES:
        errors.append(
            Error(
                f"DLOCK_DATABASE names {alias!r}, which is not a key of DATABASES.",
                hint=f"Use one of: {', '.join(map(repr, settings.DATABASES))}.",
                id="django_dlock.E004",
            )
        )
        return errors
    errors.extend(_check_database(alias))
    return errors


def _check_backoff() -> list[CheckMessage]:
    """The waits of a blocking acquire (``lock(..., timeout=...)``)."""
    errors: list[CheckMessage] = []
    base, cap = conf.BACKOFF_BASE, conf.BACKOFF_MAX
    if not _is_seconds(base):
        errors.append(_not_seconds("DLOCK_BACKOFF_BASE", base, "0.002", "E301"))
    if not _is_seconds(cap):
        errors.append(_not_seconds("DLOCK_BACKOFF_MAX", cap, "0.5", "E302"))
    if _is_seconds(base) and _is_seconds(cap) and base > cap:
        errors.append(
            Error(
                f"DLOCK_BACKOFF_BASE ({base!r}) is larger than DLOCK_BACKOFF_MAX ({cap!r}).",
                hint="Lower DLOCK_BACKOFF_BASE or raise DLOCK_BACKOFF_MAX.",
                id="django_dlock.E303",
            )
        )
    listen = conf.LISTEN
    if listen not in (True, False, "auto"):
        errors.append(
            Error(
                f'DLOCK_LISTEN must be True, False or "auto", not {listen!r}.',
                hint='Leave it unset ("auto": listen unless behind a connection pooler).',
                id="django_dlock.E304",
            )
        )
    return errors


def _check_database(alias: str) -> list[CheckMessage]:
    connection = connections[alias]
    if connection.vendor not in BACKENDS:
        # Its SQL cannot run there: every lock operation would fail.
        return [
            Error(
                f"DLOCK_DATABASE {alias!r} is {connection.vendor}, which django-dlock "
                f"does not support (it supports {', '.join(sorted(BACKENDS))}).",
                hint="Point DLOCK_DATABASE at a PostgreSQL, MariaDB or SQLite database.",
                id="django_dlock.E006",
            )
        ]
    if connection.vendor == "sqlite":
        return _check_sqlite(alias, connection.settings_dict)
    if connection.vendor == "mysql":
        return check_mysql_settings(alias)
    return []


def _check_sqlite(alias: str, settings_dict: dict[str, Any]) -> list[CheckMessage]:
    messages: list[CheckMessage] = []
    options = settings_dict.get("OPTIONS", {})
    if connections[alias].is_in_memory_db():  # type: ignore[attr-defined]
        messages.append(
            Error(
                f"DLOCK_DATABASE {alias!r} is an in-memory SQLite database, which no "
                "other process can see: its locks exclude nobody.",
                hint="Give the database a file NAME.",
                id="django_dlock.E005",
            )
        )
    mode = str(options.get("transaction_mode") or "DEFERRED").upper()
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
    timeout = options.get("timeout", 5)
    if not _is_seconds(timeout) or timeout < MIN_SQLITE_TIMEOUT:
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
