"""Every check id the package can emit is written in one place, means one thing,
and has its row in the docs' checks page (docs/checks.md).

The ids are collected from the source (an ``ast`` walk of ``django_dlock/``),
then as many checks as can fire without a server are made to fire: those must
emit only collected ids, and every collected id must fire here or against a
real server in the test named for it (SERVER_ONLY).
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from django.core.checks import CheckMessage
from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.test import override_settings

from django_dlock.checks import check_database, check_settings
from tests.utils import extra_database

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "django_dlock"
DOCS = ROOT / "docs" / "checks.md"
CHECK_ID = re.compile(r"django_dlock\.[CEWID]\d{3}")
MESSAGE_CLASSES = {"CheckMessage", "Critical", "Error", "Warning", "Info", "Debug"}

# The ids that only a real server makes fire, and the tests where it does.
SERVER_ONLY = {
    "django_dlock.E402": "tests/test_checks_postgresql.py::test_a_standby_is_an_error",
    "django_dlock.W010": "tests/test_checks_postgresql.py::test_synchronous_commit_or_fsync_off_warns",
    "django_dlock.W011": "tests/test_checks_postgresql.py::test_synchronous_commit_or_fsync_off_warns",
    "django_dlock.E403": "tests/test_checks_mysql.py::TestServer::test_a_case_insensitive_resource_column",
    "django_dlock.E405": "tests/test_checks_mysql.py::TestServer::test_a_table_without_transactions",
}


def written_ids() -> dict[str, list[str]]:
    """{check id: where the source writes it}, for every id in ``django_dlock/``."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and CHECK_ID.fullmatch(node.value)
            ):
                found[node.value].append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return dict(found)


def computed_ids() -> list[str]:
    """Where a check message gets an id that is neither a literal nor a parameter
    (a literal at the call site), which the walk above would not see."""
    computed: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            computed.extend(
                f"{path.relative_to(ROOT)}:{node.lineno}"
                for keyword in node.keywords
                if name in MESSAGE_CLASSES
                and keyword.arg == "id"
                and not isinstance(keyword.value, ast.Constant | ast.Name)
            )
    return computed


def documented_ids() -> dict[str, str]:
    """{check id: its table row} of docs/checks.md."""
    rows = {}
    for line in DOCS.read_text().splitlines():
        match = re.match(r"\| `(django_dlock\.[A-Z]\d{3})` \|", line)
        if match:
            assert match.group(1) not in rows, f"{match.group(1)} has two rows"
            rows[match.group(1)] = line
    return rows


def test_every_id_is_written_once() -> None:
    ids = written_ids()
    assert len(ids) > 20
    assert computed_ids() == []
    assert {id_: where for id_, where in ids.items() if len(where) > 1} == {}


def test_every_id_is_documented_and_every_row_is_an_id() -> None:
    written, documented = set(written_ids()), documented_ids()
    assert sorted(written - set(documented)) == []
    retired = {id_ for id_, row in documented.items() if "| retired |" in row}
    assert sorted(set(documented) - written - retired) == []
    assert sorted(retired & written) == []  # a retired id is never emitted again


# -- making the checks fire --------------------------------------------------------------------


@contextmanager
def _lock_database(**settings_dict: Any) -> Iterator[BaseDatabaseWrapper]:
    """DLOCK_DATABASE as an alias with these settings (not connected unless asked)."""
    with (
        extra_database("fired", **settings_dict) as connection,
        override_settings(DLOCK_DATABASE="fired"),
    ):
        yield connection


def _fired(
    context: AbstractContextManager[Any], check: Callable[..., list[CheckMessage]], **kwargs: Any
) -> set[str]:
    with context:
        return {str(message.id) for message in check(**kwargs)}


def fire_all(tmp_path: Path, django_db_blocker: Any, monkeypatch: Any) -> set[str]:
    """Every id that fires without a server, by setting what makes each check fire."""
    fired: set[str] = set()
    wrongs: list[dict[str, Any]] = [
        {"DLOCK_DEFAULT_TTL": 0, "DLOCK_MAX_TTL": 0},  # E001, E002
        {"DLOCK_DEFAULT_TTL": 120, "DLOCK_MAX_TTL": 60},  # E003
        {"DLOCK_DATABASE": "nope", "DLOCK_DEFAULT_TLL": 1},  # E004, W004
        {
            "DLOCK_BACKOFF_BASE": 0,
            "DLOCK_BACKOFF_MAX": 0,
            "DLOCK_LISTEN": "yes",
        },  # E301, E302, E304
        {"DLOCK_BACKOFF_BASE": 2, "DLOCK_BACKOFF_MAX": 1},  # E303
        {"DLOCK_RESOURCE_GROUP": 42, "DLOCK_RESOURCE_GROUPS": "job"},  # E501, E502
        {"DLOCK_THROTTLE_RATES": {"email": "often"}},  # E601
        {"DLOCK_ADMIN_EDIT_TTL": 0},  # E701
        {"DLOCK_BEAT_SCHEDULER": "nope.schedulers:DatabaseScheduler"},  # E702
    ]
    for wrong in wrongs:
        fired |= _fired(override_settings(**wrong), check_settings)

    sqlite = {"ENGINE": "django.db.backends.sqlite3", "NAME": str(tmp_path / "locks.sqlite3")}
    in_memory: dict[str, Any] = {**sqlite, "NAME": ":memory:", "OPTIONS": {"timeout": 1}}
    with _lock_database(**in_memory) as connection:  # E005, W001, W002
        monkeypatch.setattr(connection, "Database", SimpleNamespace(sqlite_version_info=(3, 34)))
        fired |= _fired(nullcontext(), check_database)  # E007
    missing = {**sqlite, "NAME": str(tmp_path / "missing" / "locks.sqlite3")}
    with django_db_blocker.unblock():
        fired |= _fired(_lock_database(**missing), check_database, databases=["fired"])  # W005
    mirror = {**sqlite, "TEST": {"MIRROR": "default"}}
    fired |= _fired(_lock_database(**mirror), check_database)  # E401
    with monkeypatch.context() as patch:
        patch.setattr(connections["default"], "vendor", "oracle")
        fired |= _fired(nullcontext(), check_database)  # E006

    if _importable("MySQLdb"):
        mysql = {"ENGINE": "django.db.backends.mysql", "NAME": "dlock", "TIME_ZONE": "Asia/Tokyo"}
        options = {"isolation_level": "repeatable read", "charset": "utf8"}
        fired |= _fired(
            _lock_database(**mysql, OPTIONS=options), check_database
        )  # E400, W400, E404

    if _importable("rest_framework"):
        from django_dlock.api.checks import check_api_settings

        for permissions in ["nope", ["nope.Missing", "django.db.models.Model"]]:  # E101; E102, E103
            fired |= _fired(
                override_settings(DLOCK_API_PERMISSION_CLASSES=permissions), check_api_settings
            )
        rates = {"DEFAULT_THROTTLE_RATES": {"dlock": "often"}}
        fired |= _fired(override_settings(REST_FRAMEWORK=rates), check_api_settings)  # E104
    return fired


def _importable(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def test_what_fires_is_collected_and_the_rest_fires_against_a_server(
    tmp_path: Path, django_db_blocker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    written = set(written_ids())
    fired = fire_all(tmp_path, django_db_blocker, monkeypatch)
    assert sorted(fired - written) == []
    unfired = written - fired - set(SERVER_ONLY)
    if not _importable("MySQLdb"):
        unfired -= {"django_dlock.E400", "django_dlock.W400", "django_dlock.E404"}
    if not _importable("rest_framework"):
        unfired -= {id_ for id_ in unfired if id_.startswith("django_dlock.E1")}
    assert sorted(unfired) == []


def test_the_server_only_tests_exist() -> None:
    for where in SERVER_ONLY.values():
        path, *names = where.split("::")
        source = (ROOT / path).read_text()
        assert all(f"def {name}(" in source or f"class {name}" in source for name in names), where
