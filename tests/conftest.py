from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connection


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from django.conf import settings

    engine = settings.DATABASES["default"]["ENGINE"]
    on_postgres, on_sqlite = engine.endswith("postgresql"), engine.endswith("sqlite3")
    needs_postgres = pytest.mark.skip(reason="needs PostgreSQL (DATABASE_URL=postgres://...)")
    needs_sqlite = pytest.mark.skip(reason="needs SQLite (run without DATABASE_URL)")
    for item in items:
        if "requires_postgres" in item.keywords and not on_postgres:
            item.add_marker(needs_postgres)
        if "requires_sqlite" in item.keywords and not on_sqlite:
            item.add_marker(needs_sqlite)


@pytest.fixture
def vendor() -> str:
    """The backend the suite runs on: 'sqlite' or 'postgresql'."""
    return connection.vendor


@pytest.fixture(scope="session", autouse=True)
def _close_listeners(django_db_setup: None) -> Iterator[None]:
    """Close the waiters' listening connections before the test database is
    dropped (PostgreSQL refuses to drop a database that has sessions)."""
    yield
    from django_dlock.backends import stop_listeners

    stop_listeners()
