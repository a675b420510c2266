"""Distributed locks kept in the database the Django project already has."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django_dlock.exceptions import (
    DlockError,
    InvalidArgument,
    LockDeadlock,
    LockExpired,
    LockLost,
    LockNotAcquired,
    LockNotOwned,
    LockTransactionError,
    Throttled,
)

if TYPE_CHECKING:
    from django_dlock.kinds import LockKind
    from django_dlock.leaders import Leader, aobserve_leader, observe_leader
    from django_dlock.locking import lock
    from django_dlock.once import once_per
    from django_dlock.throttles import throttle

__all__ = [
    "DlockError",
    "InvalidArgument",
    "Leader",
    "LockDeadlock",
    "LockExpired",
    "LockKind",
    "LockLost",
    "LockNotAcquired",
    "LockNotOwned",
    "LockTransactionError",
    "Throttled",
    "aobserve_leader",
    "lock",
    "observe_leader",
    "once_per",
    "throttle",
]


def __getattr__(name: str) -> Any:
    if name == "__version__":
        # The version is stated once, in pyproject.toml; the installed
        # package's metadata carries it. Read when asked, not at each import.
        from importlib.metadata import version

        return version("django-dlock")
    # `lock` needs the models, which cannot be imported before the app registry
    # is ready; importing it lazily keeps `import django_dlock` safe in settings.
    if name == "lock":
        from django_dlock.locking import lock

        return lock
    if name == "throttle":
        from django_dlock.throttles import throttle

        return throttle
    if name == "once_per":
        from django_dlock.once import once_per

        return once_per
    if name in ("Leader", "observe_leader", "aobserve_leader"):
        from django_dlock import leaders

        return getattr(leaders, name)
    if name == "LockKind":
        from django_dlock.kinds import LockKind

        return LockKind
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
