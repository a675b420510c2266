from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from django.db import connection

if TYPE_CHECKING:
    from tests.task_processes import DbWorkers


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from django.conf import settings

    engine = settings.DATABASES["default"]["ENGINE"]
    on_postgres, on_sqlite = engine.endswith("postgresql"), engine.endswith("sqlite3")
    needs_postgres = pytest.mark.skip(reason="needs PostgreSQL (DATABASE_URL=postgres://...)")
    needs_sqlite = pytest.mark.skip(reason="needs SQLite (run without DATABASE_URL)")
    # scripts/test.sh runs the tests that do not depend on the database once, on SQLite, and
    # sets this for the other databases' steps.
    skip_vendor_independent = os.environ.get("DLOCK_SKIP_VENDOR_INDEPENDENT") == "1"
    ran_elsewhere = pytest.mark.skip(reason="vendor-independent: runs once, in the SQLite step")
    for item in items:
        if skip_vendor_independent and "vendor_independent" in item.keywords:
            item.add_marker(ran_elsewhere)
        if "requires_postgres" in item.keywords and not on_postgres:
            item.add_marker(needs_postgres)
        if "requires_sqlite" in item.keywords and not on_sqlite:
            item.add_marker(needs_sqlite)


@pytest.fixture
def vendor() -> str:
    """The backend the suite runs on: 'sqlite' or 'postgresql'."""
    return connection.vendor


@pytest.fixture
def db_workers(tmp_path: Path, django_db_setup: None) -> Iterator[DbWorkers]:
    """django-tasks-db ``db_worker`` processes on the test database, stopped after the test."""
    from tests.task_processes import DbWorkers

    workers = DbWorkers(tmp_path, connection.settings_dict["NAME"])
    try:
        yield workers
    finally:
        workers.stop_all()


@pytest.fixture(scope="session", autouse=True)
def _close_listeners(django_db_setup: None) -> Iterator[None]:
    """Close the waiters' listening connections before the test database is
    dropped (PostgreSQL refuses to drop a database that has sessions)."""
    yield
    from django_dlock.listeners.registry import stop_listeners

    stop_listeners()


@pytest.fixture(scope="session", autouse=True)
def _database_features_known(django_db_setup: None, django_db_blocker: Any) -> None:
    """Ask each database once, at the start, whether it supports JSON: a
    JSONField's model check (django_tasks_db's, installed with the tasks tests)
    asks when ``manage.py check`` runs, which tests without database access do."""
    from django.db import connections

    with django_db_blocker.unblock():
        for alias in connections:
            assert connections[alias].features.supports_json_field is not None
