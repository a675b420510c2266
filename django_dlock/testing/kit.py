"""The testing kit: one object with every helper, which the pytest fixture
``dlock`` and ``DlockTestMixin.dlock`` give a test."""

from __future__ import annotations

from contextlib import AbstractContextManager
from datetime import timedelta

from django_dlock.testing.clock import advance_lock_clock
from django_dlock.testing.holds import FOREIGN_LABEL, ForeignHold, take_foreign
from django_dlock.testing.leaks import assert_no_locks_left, held_now, is_held
from django_dlock.testing.records import (
    LockRecorder,
    assert_not_locked,
    assert_ran_under_lock,
    record_locks,
)


class LockTestKit:
    """Helpers for one test on the lock database ``using`` (``None``:
    ``DLOCK_DATABASE``). ``finish()`` releases what the kit holds; the pytest
    fixture and the mixin call it when the test ends."""

    def __init__(self, *, using: str | None = None) -> None:
        self.using = using
        self._holds: list[ForeignHold] = []

    def hold(
        self,
        resource: str,
        *,
        ttl: float = 60,
        shared: bool = False,
        limit: int | None = None,
        label: str = FOREIGN_LABEL,
    ) -> ForeignHold:
        """Hold ``resource`` as another process would (an owner of the kit's own),
        for ``ttl`` seconds; as a reader (``shared``) or one of ``limit`` permits.
        ``AssertionError`` if it is held already in a way that excludes this."""
        held = take_foreign(
            resource, ttl=ttl, shared=shared, limit=limit, label=label, using=self.using
        )
        self._holds.append(held)
        return held

    def release(self, resource: str) -> None:
        """Release every hold the kit has of ``resource``."""
        for held in self._holds:
            if held.resource == resource and not held.released:
                held.release()

    def advance(self, seconds: float | timedelta) -> int:
        """Move the lock tables' clock forward (``advance_lock_clock``)."""
        return advance_lock_clock(seconds, using=self.using)

    def is_held(self, resource: str) -> bool:
        """Whether anyone validly holds ``resource`` now."""
        return is_held(resource, using=self.using)

    def record(self) -> AbstractContextManager[LockRecorder]:
        """``record_locks()``: the lock events of a block."""
        return record_locks()

    def assert_ran_under(
        self, resource: str, *, released: bool = True
    ) -> AbstractContextManager[LockRecorder]:
        """``assert_ran_under_lock()``: the block took (and released) ``resource``."""
        return assert_ran_under_lock(resource, released=released)

    def assert_not_locked(self, resource: str) -> AbstractContextManager[LockRecorder]:
        """``assert_not_locked()``: the block did not take ``resource``."""
        return assert_not_locked(resource)

    def snapshot(self) -> set[tuple[str, str, int]]:
        """The holds valid now, for ``assert_no_leaks``."""
        return held_now(using=self.using)

    def assert_no_leaks(self, before: set[tuple[str, str, int]]) -> None:
        """Fail when a hold is valid now that was not in ``before``, other than the kit's own."""
        self.finish()
        assert_no_locks_left(before, using=self.using)

    def finish(self) -> None:
        """Release every hold the kit still has."""
        for held in self._holds:
            if not held.released:
                held.release()
