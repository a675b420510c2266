"""The system checks of a MySQL or MariaDB lock database: the settings and the
server state under which its locks would not hold."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.apps import apps
from django.core.checks import CheckMessage, Error, Warning

from django_dlock.backends.checks import BackendChecks

if TYPE_CHECKING:
    from django.db.backends.utils import CursorWrapper

# Django opens MySQL connections in this isolation level unless
# OPTIONS["isolation_level"] says otherwise.
READ_COMMITTED = "read committed"
# The fields of django-dlock's models that hold a name compared byte for byte:
# a resource, or a throttle key.
NAME_FIELDS = ("resource", "key")

_ISOLATION_WHY = (
    "Under REPEATABLE READ and SERIALIZABLE a SELECT ... FOR UPDATE that finds "
    "no row takes a gap lock, and two processes acquiring a new resource at once "
    "deadlock instead of one winning; READ UNCOMMITTED lets reads see locks that "
    "are then rolled back."
)


class MySQLChecks(BackendChecks):
    def check_settings(self) -> list[CheckMessage]:
        messages = super().check_settings()
        alias = self.alias
        level = self.options.get("isolation_level", READ_COMMITTED)
        # None leaves the level to the server: check_server reads it there.
        if level is not None and str(level).lower() != READ_COMMITTED:
            messages.append(self._isolation_error(str(level)))
        charset = self.options.get("charset", "utf8")
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
        time_zone = self.settings_dict.get("TIME_ZONE")
        if time_zone not in (None, "UTC"):
            messages.append(
                Error(
                    f"DATABASES[{alias!r}]['TIME_ZONE'] is {time_zone!r}: Django then stores "
                    "datetimes in that zone, while the locks' clock is UTC_TIMESTAMP(6), so "
                    "every expiry would be off by the zone's offset.",
                    hint=f"Remove DATABASES[{alias!r}]['TIME_ZONE'] (or set it to 'UTC').",
                    id="django_dlock.E404",
                )
            )
        return messages

    def check_server(self, cursor: CursorWrapper) -> list[CheckMessage]:
        """The isolation level (when the settings leave it to the server), the
        storage engine of the tables and the collation of the resource columns."""
        messages = super().check_server(cursor)
        alias = self.alias
        if "isolation_level" in self.options and self.options["isolation_level"] is None:
            cursor.execute(
                "SHOW SESSION VARIABLES WHERE Variable_name IN "
                "('tx_isolation', 'transaction_isolation')"
            )
            level = cursor.fetchone()[1].replace("-", " ").lower()
            if level != READ_COMMITTED:
                messages.append(self._isolation_error(f"{level} (the server's default)"))
        # Every table of django-dlock, and every column of them that holds a resource
        # name or a throttle key.
        models = list(apps.get_app_config("django_dlock").get_models())
        tables = [model._meta.db_table for model in models]
        placeholders = ", ".join(["%s"] * len(tables))
        cursor.execute(
            "SELECT TABLE_NAME, ENGINE FROM information_schema.TABLES "  # noqa: S608
            f"WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN ({placeholders})",
            tables,
        )
        for table, engine in cursor.fetchall():
            if str(engine).lower() != "innodb":
                messages.append(
                    Error(
                        f"The table {table} of DLOCK_DATABASE {alias!r} uses the {engine} "
                        "storage engine, which has no transactions or row locks: "
                        "SELECT ... FOR UPDATE excludes nobody.",
                        hint=f"ALTER TABLE {table} ENGINE=InnoDB;",
                        id="django_dlock.E405",
                    )
                )
        resource_fields = {  # {(table, column): field}
            (model._meta.db_table, field.column): field
            for model in models
            for field in model._meta.concrete_fields
            if field.name in NAME_FIELDS
        }
        pairs = ", ".join(["(%s, %s)"] * len(resource_fields))
        cursor.execute(
            "SELECT TABLE_NAME, COLUMN_NAME, COLLATION_NAME FROM information_schema.COLUMNS "  # noqa: S608
            f"WHERE TABLE_SCHEMA = DATABASE() AND (TABLE_NAME, COLUMN_NAME) IN ({pairs})",
            [name for pair in resource_fields for name in pair],
        )
        for table, column, collation in cursor.fetchall():
            if not str(collation).endswith("_bin"):
                length = resource_fields[(table, column)].max_length
                messages.append(
                    Error(
                        f"The column {table}.{column} of DLOCK_DATABASE {alias!r} has the "
                        f"collation {collation}, which compares names regardless of case "
                        "or accents: 'job:42' and 'JOB:42' would be one lock (or one "
                        "throttle key).",
                        hint=f"ALTER TABLE {table} MODIFY {column} VARCHAR({length}) "
                        "CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL; "
                        "(django_dlock's migrations 0003, 0006 and 0007 do this).",
                        id="django_dlock.E403",
                    )
                )
        return messages

    def _isolation_error(self, level: str) -> Error:
        alias = self.alias
        return Error(
            f"DLOCK_DATABASE {alias!r} runs its transactions in {level.upper()}. {_ISOLATION_WHY}",
            hint=f"Remove DATABASES[{alias!r}]['OPTIONS']['isolation_level'] (Django's default "
            "is 'read committed'), or give the locks a database alias of their own with it.",
            id="django_dlock.E400",
        )
