"""A testing kit for code that locks: hold a lock as another process would,
assert that a call ran under a lock, move the lock tables' clock forward, and
fail a test that leaves a lock held. The pytest plugin
(``django_dlock.testing.pytest_plugin``, loaded by its ``pytest11`` entry
point) gives the ``dlock`` fixture; ``DlockTestMixin`` gives ``self.dlock`` to
Django's ``TestCase`` and ``TransactionTestCase``. See docs/testing.md.

The names are imported when first used: the pytest plugin is a module of this
package, and pytest imports it before Django's app registry is ready."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from django_dlock.testing.clock import advance_lock_clock
    from django_dlock.testing.holds import ForeignHold
    from django_dlock.testing.kit import LockTestKit
    from django_dlock.testing.leaks import held_now, is_held
    from django_dlock.testing.mixins import DlockTestMixin
    from django_dlock.testing.records import (
        LockEvent,
        LockRecorder,
        assert_not_locked,
        assert_ran_under_lock,
        record_locks,
    )

# Each public name and the module of the kit that defines it.
_MODULES = {
    "DlockTestMixin": "mixins",
    "ForeignHold": "holds",
    "LockEvent": "records",
    "LockRecorder": "records",
    "LockTestKit": "kit",
    "advance_lock_clock": "clock",
    "assert_not_locked": "records",
    "assert_ran_under_lock": "records",
    "held_now": "leaks",
    "is_held": "leaks",
    "record_locks": "records",
}

__all__ = [
    "DlockTestMixin",
    "ForeignHold",
    "LockEvent",
    "LockRecorder",
    "LockTestKit",
    "advance_lock_clock",
    "assert_not_locked",
    "assert_ran_under_lock",
    "held_now",
    "is_held",
    "record_locks",
]


def __getattr__(name: str) -> Any:
    if name in _MODULES:
        return getattr(importlib.import_module(f"{__name__}.{_MODULES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
