"""Run by tests/test_testing_kit.py with ``dlock_fail_on_leaked_locks = true``."""

from __future__ import annotations

import pytest

from django_dlock.models import DistributedLock


@pytest.mark.django_db
def test_error_leaves_a_lock():
    DistributedLock.objects.acquire("ini:1", ttl=30)


@pytest.mark.django_db(transaction=True)
def test_pass_releases():
    DistributedLock.objects.acquire("ini:2", "me", ttl=30)
    DistributedLock.objects.release("ini:2", "me")


def test_pass_no_database_is_not_touched():
    assert 1 + 1 == 2
