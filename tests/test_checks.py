"""manage.py check reports wrong settings with stable ids, and asks the lock
database's backend about the rest (tests/test_checks_<vendor>.py)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import connections
from django.test import override_settings

from django_dlock.checks import check_database, check_settings
from tests.utils import extra_database


def ids(settings: Any = None) -> list[str | None]:
    return [message.id for message in check_settings()]


def test_defaults_pass(vendor: str) -> None:
    assert ids() == []
    assert check_database() == []


@pytest.mark.parametrize("value", [0, -5, "60", None, True, float("inf")])
def test_default_ttl_must_be_positive_seconds(settings: Any, value: object) -> None:
    settings.DLOCK_DEFAULT_TTL = value
    assert ids() == ["django_dlock.E001"]


@pytest.mark.parametrize("value", [0, "day", float("nan"), 10**12])
def test_max_ttl_must_be_positive_seconds(settings: Any, value: object) -> None:
    settings.DLOCK_MAX_TTL = value
    assert ids() == ["django_dlock.E002"]


@pytest.mark.parametrize("value", ["60", 0, None])
def test_a_lock_under_a_bad_default_ttl_names_the_setting(settings: Any, value: object) -> None:
    """The caller named no ttl: the fault is the setting's, which the error names, and which
    manage.py check reports (E001), not the caller's argument."""
    from django_dlock import lock

    settings.DLOCK_DEFAULT_TTL = value
    with pytest.raises(ImproperlyConfigured) as error:
        lock("x:1")
    assert "DLOCK_DEFAULT_TTL" in str(error.value)
    assert repr(value) in str(error.value)
    assert "django_dlock.E001" in str(error.value)
    assert ids() == ["django_dlock.E001"]
    assert lock("x:1", ttl=30).ttl == 30  # a ttl given is the caller's, and fine


def test_a_lock_under_a_default_ttl_above_the_max_ttl_names_both_settings(settings: Any) -> None:
    from django_dlock import lock

    settings.DLOCK_DEFAULT_TTL = 120
    settings.DLOCK_MAX_TTL = 60
    with pytest.raises(ImproperlyConfigured, match="DLOCK_DEFAULT_TTL.*DLOCK_MAX_TTL"):
        lock("x:1")
    assert ids() == ["django_dlock.E003"]


def test_default_ttl_above_max_ttl(settings: Any) -> None:
    settings.DLOCK_DEFAULT_TTL = 120
    settings.DLOCK_MAX_TTL = 60
    assert ids() == ["django_dlock.E003"]


def test_a_misspelled_setting_is_reported(settings: Any) -> None:
    settings.DLOCK_DEFAULT_TLL = 30
    messages = check_settings()
    assert [m.id for m in messages] == ["django_dlock.W004"]
    assert messages[0].hint == "Did you mean DLOCK_DEFAULT_TTL?"


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        ("DLOCK_TTL", "DLOCK_DEFAULT_TTL"),
        ("DLOCK_DEFAULT_TLL", "DLOCK_DEFAULT_TTL"),
        ("DLOCK_MAXTTL", "DLOCK_MAX_TTL"),
        ("DLOCK_THROTTLE_RATE", "DLOCK_THROTTLE_RATES"),
        ("DLOCK_RATES", "DLOCK_THROTTLE_RATES"),
        ("DLOCK_BACKOFF", "DLOCK_BACKOFF_BASE"),
        ("DLOCK_DATABASES", "DLOCK_DATABASE"),
    ],
)
def test_a_misspelled_setting_is_told_the_likeliest_one(
    settings: Any, typed: str, meant: str
) -> None:
    setattr(settings, typed, 30)
    [message] = check_settings()
    assert message.id == "django_dlock.W004"
    assert message.hint == f"Did you mean {meant}?"


@pytest.mark.parametrize(
    "value",
    [["10/m"], {"email": "often"}, {"email": "0/m"}, {"email": 10}, {"a/b": "1/m"}, {"": "1/m"}],
)
def test_throttle_rates_must_name_rates_that_read(settings: Any, value: object) -> None:
    settings.DLOCK_THROTTLE_RATES = value
    assert ids() == ["django_dlock.E601"]


def test_throttle_rates_that_read_pass(settings: Any) -> None:
    settings.DLOCK_THROTTLE_RATES = {"email": "10/m", "export": "5/10m", "sms": "1/day"}
    assert ids() == []


@pytest.mark.parametrize("value", [0, -1, "60", True, float("nan"), 86401])
def test_admin_edit_ttl_must_be_seconds_within_max_ttl(settings: Any, value: object) -> None:
    settings.DLOCK_ADMIN_EDIT_TTL = value
    assert ids() == ["django_dlock.E701"]


def test_admin_edit_ttl_of_a_few_seconds_passes(settings: Any) -> None:
    settings.DLOCK_ADMIN_EDIT_TTL = 3
    assert ids() == []


def test_database_must_be_a_configured_alias(settings: Any) -> None:
    settings.DLOCK_DATABASE = "nope"
    messages = check_settings()
    assert [m.id for m in messages] == ["django_dlock.E004"]
    assert "'default'" in (messages[0].hint or "")
    assert check_database(databases=["default"]) == []  # nothing more to say


def test_an_unsupported_database_is_an_error(monkeypatch: Any) -> None:
    monkeypatch.setattr(connections["default"], "vendor", "oracle")
    messages = check_database()
    assert [m.id for m in messages] == ["django_dlock.E006"]
    assert "oracle" in messages[0].msg


def test_the_lock_database_is_checked_not_another(tmp_path: Path) -> None:
    # An in-memory SQLite database is an error (E005), but only as DLOCK_DATABASE.
    with extra_database("memory", ENGINE="django.db.backends.sqlite3", NAME=":memory:"):
        assert check_database() == []
        with override_settings(DLOCK_DATABASE="memory"):
            assert "django_dlock.E005" in [m.id for m in check_database()]


# -- a replica as the lock database (every vendor) ---------------------------------------


def test_a_test_mirror_as_lock_database_is_an_error() -> None:
    primary = {**connections["default"].settings_dict, "TEST": {"MIRROR": "default"}}
    with extra_database("replica", **primary), override_settings(DLOCK_DATABASE="replica"):
        [error] = check_database()
    assert error.id == "django_dlock.E401"
    assert "'replica'" in error.msg
    assert error.hint is not None and "'default'" in error.hint


def test_the_primary_as_lock_database_passes() -> None:
    primary = {**connections["default"].settings_dict, "TEST": {"MIRROR": "default"}}
    with extra_database("replica", **primary):
        assert check_database() == []


# -- the server, asked only where checks may use the database --------------------------------


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A loopback port that nobody listens on (bound here, so nobody can start to)."""
    with socket.socket() as bound:
        bound.bind(("127.0.0.1", 0))
        yield bound.getsockname()[1]


def unreachable_settings(vendor: str, port: int, tmp_path: Path) -> dict[str, Any]:
    """DATABASES settings of a ``vendor`` database that cannot be reached, and
    that would raise no other check."""
    if vendor == "sqlite":
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(tmp_path / "missing" / "locks.sqlite3"),
            "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 5},
        }
    if vendor == "postgresql":
        pytest.importorskip("psycopg")
        engine, options = "django.db.backends.postgresql", {}
    else:
        pytest.importorskip("MySQLdb")  # the mysql extra
        engine, options = "django.db.backends.mysql", {"charset": "utf8mb4"}
    server = {"HOST": "127.0.0.1", "PORT": str(port), "USER": "dlock", "PASSWORD": "dlock"}
    return {"ENGINE": engine, "NAME": "dlock", "OPTIONS": options, **server}


@pytest.mark.parametrize("vendor", ["sqlite", "postgresql", "mysql"])
def test_an_unreachable_database_is_one_warning_on_every_vendor(
    vendor: str, closed_port: int, tmp_path: Path, django_db_blocker: Any
) -> None:
    database = unreachable_settings(vendor, closed_port, tmp_path)
    with (
        extra_database("unreachable", **database),
        override_settings(DLOCK_DATABASE="unreachable"),
    ):
        assert check_database() == []  # nothing is asked without the database tag
        with django_db_blocker.unblock():
            messages = check_database(databases=["unreachable"])
    assert [m.id for m in messages] == ["django_dlock.W005"]
    assert messages[0].msg.startswith(
        "DLOCK_DATABASE 'unreachable' could not be reached, so the checks that ask its "
        "server did not run: "
    )
    assert messages[0].hint is not None
    assert "manage.py check --database unreachable" in messages[0].hint


@pytest.mark.parametrize("vendor", ["sqlite", "postgresql"])
def test_check_database_on_an_unreachable_database_warns(
    vendor: str, closed_port: int, tmp_path: Path, django_db_blocker: Any
) -> None:
    # (MySQL: Django's own database check raises first, asking the server's sql_mode.)
    database = unreachable_settings(vendor, closed_port, tmp_path)
    out, err = StringIO(), StringIO()
    with (
        extra_database("unreachable", **database),
        override_settings(DLOCK_DATABASE="unreachable"),
        django_db_blocker.unblock(),
    ):
        # The database tag only: a model check of another app (a JSONField asks
        # its database what it supports) would raise first.
        call_command(
            "check", "--database", "unreachable", "--tag", "database", stdout=out, stderr=err
        )
    assert "django_dlock.W005" in err.getvalue() + out.getvalue()


# -- manage.py check ------------------------------------------------------------------------


def test_manage_py_check_fails_on_a_wrong_setting(settings: Any) -> None:
    settings.DLOCK_MAX_TTL = -1
    with pytest.raises(SystemCheckError, match=r"django_dlock\.E002"):
        call_command("check", stdout=StringIO(), stderr=StringIO())


def test_manage_py_check_passes() -> None:
    out = StringIO()
    call_command("check", stdout=out)
    assert "no issues" in out.getvalue()


@pytest.mark.django_db
def test_manage_py_check_database_passes(vendor: str) -> None:
    out = StringIO()
    call_command("check", "--database", "default", stdout=out, stderr=StringIO())
    if vendor == "sqlite":  # (the PostgreSQL test cluster runs with fsync off: W011)
        assert "no issues" in out.getvalue()
