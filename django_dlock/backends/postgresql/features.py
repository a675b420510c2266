"""What PostgreSQL's lock backend can do, on one database alias."""

from __future__ import annotations

from functools import cached_property

from django.db import connections

from django_dlock.backends.features import BackendFeatures


class PostgreSQLFeatures(BackendFeatures):
    grants_on_release = True
    grants_shared_on_release = True
    listener_class = "django_dlock.listeners.postgresql.PostgresListener"

    def __init__(self, using: str) -> None:
        super().__init__(using)
        # The one-statement operations are built for psycopg 3's client-side
        # binding (Django's default): their parameters are typed by the PREPARE,
        # and the raw connection's autocommit is psycopg 3's. (Imported here:
        # this module is also imported where no driver is installed.)
        from django.db.backends.postgresql.psycopg_any import is_psycopg3

        options = connections[using].settings_dict.get("OPTIONS") or {}
        self.one_statement = is_psycopg3 and not options.get("server_side_binding")

    @cached_property
    def can_listen(self) -> bool:
        # psycopg2 has no notify handlers.
        try:
            import psycopg  # noqa: F401
        except ImportError:
            return False
        return True
