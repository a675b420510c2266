"""manage.py check reports wrong settings with stable ids."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import connections

from django_dlock.checks import check_settings


def ids(settings: Any = None) -> list[str | None]:
    return [message.id for message in check_settings()]


def test_defaults_pass(vendor: str) -> None:
    assert ids() == []


@pytest.mark.parametrize("value", [0, -5, "60", None, True, float("inf")])
def test_default_ttl_must_be_positive_seconds(settings: Any, value: object) -> None:
    settings.DLOCK_DEFAULT_TTL = value
    assert ids() == ["django_dlock.E001"]


@pytest.mark.parametrize("value", [0, "day", float("nan"), 10**12])
def test_max_ttl_must_be_positive_seconds(settings: Any, value: object) -> None:
    settings.DLOCK_MAX_TTL = value
    assert ids() == ["django_dlock.E002"]


def test_default_ttl_above_max_ttl(settings: Any) -> None:
    settings.DLOCK_DEFAULT_TTL = 120
    settings.DLOCK_MAX_TTL = 60
    assert ids() == ["django_dlock.E003"]


def test_a_misspelled_setting_is_reported(settings: Any) -> None:
    settings.DLOCK_DEFAULT_TLL = 30
    messages = check_settings()
    assert [m.id for m in messages] == ["django_dlock.W004"]
    assert messages[0].hint == "Did you mean DLOCK_DEFAULT_TTL?"


def test_database_must_be_a_configured_alias(settings: Any) -> None:
    settings.DLOCK_DATABASE = "nope"
    messages = check_settings()
    assert [m.id for m in messages] == ["django_dlock.E004"]
    assert "'default'" in (messages[0].hint or "")


def test_an_unsupported_database_is_an_error(monkeypatch: Any) -> None:
    monkeypatch.setattr(connections["default"], "vendor", "oracle")
    messages = check_settings()
    assert [m.id for m in messages] == ["django_dlock.E006"]
    assert "oracle" in messages[0].msg


@pytest.mark.requires_sqlite
class TestSqlite:
    def test_deferred_transactions_and_short_timeout_warn(self, monkeypatch: Any) -> None:
        settings_dict = connections["default"].settings_dict
        monkeypatch.setitem(settings_dict, "OPTIONS", {"timeout": 1})
        assert ids() == ["django_dlock.W001", "django_dlock.W002"]

    def test_immediate_transactions_pass(self, monkeypatch: Any) -> None:
        settings_dict = connections["default"].settings_dict
        monkeypatch.setitem(
            settings_dict, "OPTIONS", {"transaction_mode": "IMMEDIATE", "timeout": 5}
        )
        assert ids() == []

    def test_in_memory_database_is_an_error(self, monkeypatch: Any) -> None:
        settings_dict = connections["default"].settings_dict
        monkeypatch.setitem(settings_dict, "NAME", ":memory:")
        assert "django_dlock.E005" in ids()


def test_manage_py_check_fails_on_a_wrong_setting(settings: Any) -> None:
    settings.DLOCK_MAX_TTL = -1
    with pytest.raises(SystemCheckError, match=r"django_dlock\.E002"):
        call_command("check", stdout=StringIO(), stderr=StringIO())


def test_manage_py_check_passes() -> None:
    out = StringIO()
    call_command("check", stdout=out)
    assert "no issues" in out.getvalue()
