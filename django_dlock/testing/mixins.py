"""The kit for unittest: Django's ``TestCase`` and ``TransactionTestCase``."""

from __future__ import annotations

from typing import ClassVar

from django_dlock.testing.kit import LockTestKit


class DlockTestMixin:
    """Put it before Django's test case class: ``class T(DlockTestMixin, TestCase)``.

    ``self.dlock`` is a ``LockTestKit`` made in ``setUp`` and finished (its holds
    released) in ``tearDown``. With ``dlock_fail_on_leaked_locks = True`` the
    ``tearDown`` also fails the test when a lock is held that was not at its
    ``setUp``. ``dlock_using`` names the lock database (default ``DLOCK_DATABASE``).
    """

    dlock_fail_on_leaked_locks: ClassVar[bool] = False
    dlock_using: ClassVar[str | None] = None
    dlock: LockTestKit

    def setUp(self) -> None:
        super().setUp()  # type: ignore[misc]
        self.dlock = LockTestKit(using=self.dlock_using)
        self._dlock_before = self.dlock.snapshot() if self.dlock_fail_on_leaked_locks else set()

    def tearDown(self) -> None:
        try:
            if self.dlock_fail_on_leaked_locks:
                self.dlock.assert_no_leaks(self._dlock_before)
            else:
                self.dlock.finish()
        finally:
            super().tearDown()  # type: ignore[misc]
