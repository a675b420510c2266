"""The checks of a SQLite lock database (django_dlock/backends/sqlite/checks.py),
on a SQLite alias of its own: they run whatever database the suite uses."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from django.db.backends.base.base import BaseDatabaseWrapper
from django.test import override_settings

from django_dlock.checks import check_database
from tests.utils import extra_database

GOOD_OPTIONS = {"transaction_mode": "IMMEDIATE", "timeout": 5}


@pytest.fixture
def sqlite_locks(tmp_path: Path) -> Iterator[Any]:
    """Makes ``DLOCK_DATABASE`` a SQLite alias; call it with that alias's settings."""
    with ExitStack() as stack:

        def use(**settings_dict: Any) -> BaseDatabaseWrapper:
            file = {"ENGINE": "django.db.backends.sqlite3", "NAME": str(tmp_path / "locks.sqlite3")}
            return stack.enter_context(extra_database("sqlite_locks", **file | settings_dict))

        stack.enter_context(override_settings(DLOCK_DATABASE="sqlite_locks"))
        yield use


def ids(**kwargs: Any) -> list[str | None]:
    return [message.id for message in check_database(**kwargs)]


def test_immediate_transactions_and_a_busy_timeout_pass(sqlite_locks: Any) -> None:
    sqlite_locks(OPTIONS=GOOD_OPTIONS)
    assert ids() == []


def test_a_new_sqlite_project_gets_the_warnings_the_readme_names(sqlite_locks: Any) -> None:
    # README's quickstart: a project that keeps Django's SQLite defaults (deferred transactions,
    # Python's busy timeout of 5 s) is warned of what the README says, no more and no less.
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    sentence = readme[readme.index("`manage.py check` warns") :].split(")", 1)[0]
    named = {f"django_dlock.{id}" for id in re.findall(r"\b([EW]\d{3})\b", sentence)}
    sqlite_locks()
    assert set(ids()) == named == {"django_dlock.W001"}


def test_deferred_transactions_and_short_timeout_warn(sqlite_locks: Any) -> None:
    sqlite_locks(OPTIONS={"timeout": 1})
    assert ids() == ["django_dlock.W001", "django_dlock.W002"]


@pytest.mark.parametrize("timeout", [0, -1, "5", None, float("nan")])
def test_a_busy_timeout_that_is_no_number_of_seconds_warns(sqlite_locks: Any, timeout: Any) -> None:
    sqlite_locks(OPTIONS={**GOOD_OPTIONS, "timeout": timeout})
    assert ids() == ["django_dlock.W002"]


def test_in_memory_database_is_an_error(sqlite_locks: Any) -> None:
    sqlite_locks(NAME=":memory:", OPTIONS=GOOD_OPTIONS)
    assert ids() == ["django_dlock.E005"]


def test_an_sqlite_without_returning_is_an_error(sqlite_locks: Any, monkeypatch: Any) -> None:
    connection = sqlite_locks(OPTIONS=GOOD_OPTIONS)
    monkeypatch.setattr(connection, "Database", SimpleNamespace(sqlite_version_info=(3, 34, 1)))
    messages = check_database()
    assert [m.id for m in messages] == ["django_dlock.E007"]
    assert "SQLite 3.34.1" in messages[0].msg


def test_the_file_is_opened_only_where_checks_may_use_the_database(
    sqlite_locks: Any, tmp_path: Path, django_db_blocker: Any
) -> None:
    sqlite_locks(OPTIONS=GOOD_OPTIONS)
    assert ids(databases=["default"]) == []
    assert not (tmp_path / "locks.sqlite3").exists()
    with django_db_blocker.unblock():
        assert ids(databases=["sqlite_locks"]) == []
    assert (tmp_path / "locks.sqlite3").exists()
