"""Locks a test leaves held: the holds valid at its end that were not at its start."""

from __future__ import annotations

from django_dlock.conf import conf
from django_dlock.models import LockHold
from django_dlock.rules.clock import DatabaseNow
from django_dlock.testing.holds import manager


def held_now(*, using: str | None = None) -> set[tuple[str, str, int]]:
    """Every valid hold on ``using`` as (resource, mode, fencing token): exclusive
    locks, readers and permits."""
    locks = manager(using)
    resources = set(locks.active().values_list("resource", flat=True))
    alias = using or conf.DATABASE
    resources |= set(
        LockHold.objects.using(alias)
        .filter(expires_at__gt=DatabaseNow())
        .values_list("resource", flat=True)
    )
    return {
        (hold.resource, hold.mode, hold.fencing_token)
        for resource in resources
        for hold in locks.holders(resource)
    }


def is_held(resource: str, *, using: str | None = None) -> bool:
    """Whether anyone validly holds ``resource`` now (for a check made inside
    the code under test, e.g. in a mock's ``side_effect``)."""
    return bool(manager(using).holders(resource))


def assert_no_locks_left(before: set[tuple[str, str, int]], *, using: str | None = None) -> None:
    """Fail when holds are valid now that were not in ``before`` (a snapshot of
    ``held_now()`` at the test's start), naming them (never their owners)."""
    left = sorted(held_now(using=using) - before)
    if left:
        listed = ", ".join(
            f"{resource!r} ({mode}, token {token})" for resource, mode, token in left
        )
        raise AssertionError(f"The test left {len(left)} lock(s) held: {listed}.")
