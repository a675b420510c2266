"""The checks of a MariaDB (MySQL) lock database (django_dlock/backends/mysql/checks.py).

The settings' checks run on a MySQL alias of their own, on every suite (with
the ``mysql`` extra); those that ask the server run on the MariaDB suite."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest
from django.conf import settings
from django.db import connection
from django.test import override_settings

from django_dlock.checks import check_database
from tests.utils import extra_database

on_mariadb = pytest.mark.skipif(
    not settings.DATABASES["default"]["ENGINE"].endswith("mysql"),
    reason="needs MariaDB (DATABASE_URL=mysql://...)",
)


def ids(**kwargs: Any) -> list[str | None]:
    return [message.id for message in check_database(**kwargs)]


# -- the settings -----------------------------------------------------------------------------


@pytest.fixture
def mysql_locks() -> Iterator[Any]:
    """Makes ``DLOCK_DATABASE`` a MySQL alias (never connected); call it with settings."""
    pytest.importorskip("MySQLdb")  # the mysql extra

    with ExitStack() as stack:

        def use(**settings_dict: Any) -> None:
            database = {"ENGINE": "django.db.backends.mysql", "NAME": "dlock"}
            stack.enter_context(extra_database("mysql_locks", **database | settings_dict))

        stack.enter_context(override_settings(DLOCK_DATABASE="mysql_locks"))
        yield use


@pytest.mark.parametrize("level", ["read committed", "READ COMMITTED", None])
def test_utf8mb4_and_read_committed_pass(mysql_locks: Any, level: str | None) -> None:
    options = (
        {"charset": "utf8mb4"}
        if level is None
        else {"charset": "utf8mb4", "isolation_level": level}
    )
    mysql_locks(OPTIONS=options)
    assert ids() == []


@pytest.mark.parametrize("level", ["repeatable read", "serializable", "read uncommitted"])
def test_an_isolation_level_other_than_read_committed(mysql_locks: Any, level: str) -> None:
    mysql_locks(OPTIONS={"charset": "utf8mb4", "isolation_level": level})
    assert ids() == ["django_dlock.E400"]


def test_a_connection_character_set_without_four_byte_characters(mysql_locks: Any) -> None:
    mysql_locks(OPTIONS={})
    assert ids() == ["django_dlock.W400"]


@pytest.mark.parametrize(
    ("time_zone", "expected"), [("Europe/Paris", ["django_dlock.E404"]), ("UTC", []), (None, [])]
)
def test_a_database_time_zone_other_than_utc(
    mysql_locks: Any, time_zone: str | None, expected: list[str]
) -> None:
    mysql_locks(OPTIONS={"charset": "utf8mb4"}, TIME_ZONE=time_zone)
    messages = check_database()
    assert [m.id for m in messages] == expected
    assert all(repr(time_zone) in m.msg for m in messages)


# -- the server -------------------------------------------------------------------------------


@on_mariadb
@pytest.mark.django_db(transaction=True)
class TestServer:
    def test_a_stock_server_passes(self) -> None:
        assert ids(databases=["default"]) == []

    def test_the_servers_isolation_level_when_options_leave_it(self, monkeypatch: Any) -> None:
        options = {"charset": "utf8mb4", "isolation_level": None}
        monkeypatch.setitem(connection.settings_dict, "OPTIONS", options)
        assert ids() == []  # without the server, nothing to say
        with connection.cursor() as cursor:
            cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        try:
            assert ids(databases=["default"]) == ["django_dlock.E400"]
        finally:
            with connection.cursor() as cursor:
                cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")

    def test_a_table_without_transactions(self) -> None:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE distributed_locks_fencing_floor ENGINE=MyISAM")
        try:
            messages = check_database(databases=["default"])
            assert [m.id for m in messages] == ["django_dlock.E405"]
            assert "distributed_locks_fencing_floor" in messages[0].msg
        finally:
            with connection.cursor() as cursor:
                cursor.execute("ALTER TABLE distributed_locks_fencing_floor ENGINE=InnoDB")

    def test_a_case_insensitive_throttle_key_column(self) -> None:
        alter = (
            "ALTER TABLE distributed_lock_throttle_slots MODIFY `key` VARCHAR(255) "
            "CHARACTER SET utf8mb4 COLLATE {} NOT NULL"
        )
        with connection.cursor() as cursor:
            cursor.execute(alter.format("utf8mb4_general_ci"))
        try:
            messages = check_database(databases=["default"])
            assert [m.id for m in messages] == ["django_dlock.E403"]
            assert "distributed_lock_throttle_slots.key" in messages[0].msg
        finally:
            with connection.cursor() as cursor:
                cursor.execute(alter.format("utf8mb4_bin"))

    @pytest.mark.parametrize("table", ["distributed_locks", "distributed_lock_waiters"])
    def test_a_case_insensitive_resource_column(self, table: str) -> None:
        alter = (
            f"ALTER TABLE {table} MODIFY resource VARCHAR(255) "
            "CHARACTER SET utf8mb4 COLLATE {} NOT NULL"
        )
        with connection.cursor() as cursor:
            cursor.execute(alter.format("utf8mb4_general_ci"))
        try:
            messages = check_database(databases=["default"])
            assert [m.id for m in messages] == ["django_dlock.E403"]
            assert f"{table}.resource" in messages[0].msg
            assert "VARCHAR(255)" in (messages[0].hint or "")
        finally:
            with connection.cursor() as cursor:
                cursor.execute(alter.format("utf8mb4_bin"))
