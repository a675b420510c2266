"""The system check that DLOCK_DATABASE is no replica, without a cluster
(tests/test_cluster.py runs it against a real streaming replica)."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.test import override_settings

from django_dlock.checks_replica import (
    check_lock_database_is_primary,
    check_lock_database_not_mirror,
)


@pytest.fixture(autouse=True)
def replica_alias(monkeypatch: pytest.MonkeyPatch) -> None:
    mirror = {**settings.DATABASES["default"], "TEST": {"MIRROR": "default"}}
    monkeypatch.setitem(settings.DATABASES, "replica", mirror)


def test_a_test_mirror_as_lock_database_is_an_error() -> None:
    with override_settings(DLOCK_DATABASE="replica"):
        [error] = check_lock_database_not_mirror()
    assert error.id == "django_dlock.E401"
    assert "'replica'" in error.msg
    assert error.hint is not None and "'default'" in error.hint


def test_the_primary_as_lock_database_passes() -> None:
    with override_settings(DLOCK_DATABASE="default"):
        assert check_lock_database_not_mirror() == []


def test_the_server_is_asked_only_when_checks_may_use_the_database() -> None:
    # No databases: nothing is queried (no django_db mark, so a query would fail).
    assert check_lock_database_is_primary(databases=None) == []


@pytest.mark.requires_postgres
@pytest.mark.django_db
def test_a_primary_answers_that_it_is_not_in_recovery() -> None:
    assert check_lock_database_is_primary(databases=["default"]) == []
