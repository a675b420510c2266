from __future__ import annotations

import pytest
from django.db import connection


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from django.conf import settings

    on_postgres = settings.DATABASES["default"]["ENGINE"].endswith("postgresql")
    skip = pytest.mark.skip(reason="needs PostgreSQL (DATABASE_URL=postgres://...)")
    for item in items:
        if "requires_postgres" in item.keywords and not on_postgres:
            item.add_marker(skip)


@pytest.fixture
def vendor() -> str:
    """The backend the suite runs on: 'sqlite' or 'postgresql'."""
    return connection.vendor
