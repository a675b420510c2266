"""The pytest plugin of the testing kit, loaded by the ``pytest11`` entry point
``django_dlock``. It imports neither Django nor the kit until a test asks for
them, and adds nothing to a test that does not: the ``dlock`` fixture, the
``dlock_no_leaks`` fixture and marker, and the ini option
``dlock_fail_on_leaked_locks``. Works with pytest-django (whose database
fixtures it sets up first) and without it (the project sets its database up).
"""

from __future__ import annotations

import sys
from collections.abc import Generator, Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from django_dlock.testing.kit import LockTestKit

INI_OPTION = "dlock_fail_on_leaked_locks"
MARKER = "dlock_no_leaks"
_KIT = pytest.StashKey["LockTestKit"]()
# What makes pytest-django give a test its database.
_DATABASE_FIXTURES = frozenset(
    {
        "db",
        "transactional_db",
        "django_db_reset_sequences",
        "django_db_serialized_rollback",
        "live_server",
    }
)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        INI_OPTION,
        type="bool",
        default=False,
        help="django-dlock: fail every test that uses the database and leaves a lock held.",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}: django-dlock: fail the test if it leaves a lock held."
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, None, None]:
    """Before the last test's teardown, which drops pytest-django's test
    database, stop the connections that waiters listen on (PostgreSQL refuses
    to drop a database that has sessions). Nothing when no test waited."""
    registry = sys.modules.get("django_dlock.listeners.registry")
    if nextitem is None and registry is not None:
        registry.stop_listeners()
    return (yield)


def _uses_database(request: pytest.FixtureRequest) -> bool:
    return request.node.get_closest_marker("django_db") is not None or bool(
        _DATABASE_FIXTURES.intersection(request.fixturenames)
    )


def _database_first(request: pytest.FixtureRequest, *, default: str | None) -> None:
    """Set pytest-django's test database up before the kit's fixture (so it is
    torn down after it): the test's own (marker or fixture), else ``default``."""
    if not request.config.pluginmanager.hasplugin("django"):
        return  # no pytest-django: the project's own setup gives the database
    if _uses_database(request):
        request.getfixturevalue("_django_db_helper")
    elif default is not None:
        request.getfixturevalue(default)


@pytest.fixture
def dlock(request: pytest.FixtureRequest) -> Iterator[LockTestKit]:
    """The testing kit (``django_dlock.testing.LockTestKit``); the locks it holds
    are released when the test ends. A test without a database marker or
    fixture gets pytest-django's ``db`` (a ``TestCase``-like transaction)."""
    _database_first(request, default="db")
    from django_dlock.testing.kit import LockTestKit

    kit = LockTestKit()
    request.node.stash[_KIT] = kit
    yield kit
    kit.finish()


@pytest.fixture
def dlock_no_leaks(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail the test (an error at its teardown) when a lock is held at its end
    that was not at its start, the ``dlock`` fixture's own excepted."""
    _database_first(request, default="db")
    from django_dlock.testing.kit import LockTestKit

    kit = LockTestKit()
    before = kit.snapshot()
    yield
    if _KIT in request.node.stash:  # the dlock fixture's holds are not the test's leaks
        request.node.stash[_KIT].finish()
    kit.assert_no_leaks(before)


@pytest.fixture(autouse=True)
def _dlock_leak_check(request: pytest.FixtureRequest) -> None:
    """The marker, or the ini option for a test that uses the database, turns
    ``dlock_no_leaks`` on; for any other test this fixture does nothing."""
    wanted = request.node.get_closest_marker(MARKER) is not None or (
        request.config.getini(INI_OPTION)
        and (_uses_database(request) or not request.config.pluginmanager.hasplugin("django"))
    )
    if wanted:
        request.getfixturevalue("dlock_no_leaks")
