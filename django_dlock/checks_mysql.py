"""System checks of a MySQL or MariaDB lock database: the settings and server
state under which its locks would not hold.

``check_mysql_settings`` reads the settings only (``check_settings`` calls it);
``check_mysql_database`` asks the server, so Django runs it only with database
checks (``manage.py check --database``, ``migrate``, the test runner).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning
from django.db import connections

from django_dlock.conf import conf

# Django opens MySQL connections in this isolation level unless
# OPTIONS["isolation_level"] says otherwise.
READ_COMMITTED = "read committed"

# The tables and the columns that hold a resource name.
_TABLES = ("distributed_locks", "distributed_locks_fencing_floor", "distributed_lock_waiters")
_RESOURCE_TABLES = ("distributed_locks", "distributed_lock_waiters")

_ISOLATION_WHY = (
    "Under REPEATABLE READ and SERIALIZABLE a SELECT ... FOR UPDATE that finds "
    "no row takes a gap lock, and two processes acquiring a new resource at once "
    "deadlock instead of one winning; READ UNCOMMITTED lets reads see locks that "
    "are then rolled back."
)


def check_mysql_settings(alias: str) -> list[CheckMessage]:
    """The settings of the MySQL lock database ``alias`` (no query)."""
    settings_dict = connections[alias].settings_dict
    messages: list[CheckMessage] = []
    level = settings_dict.get("OPTIONS", {}).get("isolation_level", READ_COMMITTED)
    # None leaves the level to the server: check_mysql_database reads it there.
    if level is not None and str(level).lower() != READ_COMMITTED:
        messages.append(_isolation_error(alias, str(level)))
    charset = settings_dict.get("OPTIONS", {}).get("charset", "utf8")
    if str(charset).lower() != "utf8mb4":
        messages.append(
            Warning(
                f"DATABASES[{alias!r}] connects with the character set {charset!r} "
                "(Django's default for MySQL is utf8, three bytes a character): a lock "
                "on a valid resource name with a character outside the Basic Multilingual "
                "Plane, such as an emoji, fails with a database error.",
                hint=f"Set DATABASES[{alias!r}]['OPTIONS']['charset'] = 'utf8mb4'.",
                id="django_dlock.W400",
            )
        )
    time_zone = settings_dict.get("TIME_ZONE")
    if time_zone not in (None, "UTC"):
        messages.append(
            Error(
                f"DATABASES[{alias!r}]['TIME_ZONE'] is {time_zone!r}: Django then stores "
                "datetimes in that zone, while the locks' clock is UTC_TIMESTAMP(6), so "
                "every expiry would be off by the zone's offset.",
                hint=f"Remove DATABASES[{alias!r}]['TIME_ZONE'] (or set it to 'UTC').",
                id="django_dlock.E401",
            )
        )
    return messages


def check_mysql_database(
    app_configs: Any = None, databases: Iterable[str] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """The server state of the MySQL lock database: isolation level, storage
    engine and the collation of the resource columns."""
    alias = conf.DATABASE
    if not databases or not isinstance(alias, str) or alias not in databases:
        return []
    if alias not in settings.DATABASES:
        return []  # check_settings reports it (E004)
    connection = connections[alias]
    if connection.vendor != "mysql":
        return []
    messages: list[CheckMessage] = []
    options = connection.settings_dict.get("OPTIONS", {})
    with connection.cursor() as cursor:
        if "isolation_level" in options and options["isolation_level"] is None:
            cursor.execute(
                "SHOW SESSION VARIABLES WHERE Variable_name IN "
                "('tx_isolation', 'transaction_isolation')"
            )
            level = cursor.fetchone()[1].replace("-", " ").lower()
            if level != READ_COMMITTED:
                messages.append(_isolation_error(alias, f"{level} (the server's default)"))
        placeholders = ", ".join(["%s"] * len(_TABLES))
        cursor.execute(
            "SELECT TABLE_NAME, ENGINE FROM information_schema.TABLES "  # noqa: S608
            f"WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN ({placeholders})",
            _TABLES,
        )
        for table, engine in cursor.fetchall():
            if str(engine).lower() != "innodb":
                messages.append(
                    Error(
                        f"The table {table} of DLOCK_DATABASE {alias!r} uses the {engine} "
                        "storage engine, which has no transactions or row locks: "
                        "SELECT ... FOR UPDATE excludes nobody.",
                        hint=f"ALTER TABLE {table} ENGINE=InnoDB;",
                        id="django_dlock.E402",
                    )
                )
        placeholders = ", ".join(["%s"] * len(_RESOURCE_TABLES))
        cursor.execute(
            "SELECT TABLE_NAME, COLLATION_NAME FROM information_schema.COLUMNS "  # noqa: S608
            "WHERE TABLE_SCHEMA = DATABASE() AND COLUMN_NAME = 'resource' "
            f"AND TABLE_NAME IN ({placeholders})",
            _RESOURCE_TABLES,
        )
        for table, collation in cursor.fetchall():
            if not str(collation).endswith("_bin"):
                messages.append(
                    Error(
                        f"The column {table}.resource of DLOCK_DATABASE {alias!r} has the "
                        f"collation {collation}, which compares names regardless of case "
                        "or accents: 'job:42' and 'JOB:42' would be one lock.",
                        hint=f"ALTER TABLE {table} MODIFY resource VARCHAR(255) "
                        "CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL; "
                        "(django_dlock's migration 0003 does this).",
                        id="django_dlock.E403",
                    )
                )
    return messages


def _isolation_error(alias: str, level: str) -> Error:
    return Error(
        f"DLOCK_DATABASE {alias!r} runs its transactions in {level.upper()}. {_ISOLATION_WHY}",
        hint=f"Remove DATABASES[{alias!r}]['OPTIONS']['isolation_level'] (Django's default "
        "is 'read committed'), or give the locks a database alias of their own with it.",
        id="django_dlock.E400",
    )
