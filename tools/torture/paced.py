"""Paced calls, each recorded in the history: a throttle's use (``throttle``
events) and a run of a window that is held at least ``every`` after its grant
(``once_per`` events): ``once_per(resource, every)``, or ``lock(...,
min_hold=every)``. Only the package's public API is used, and its
``lock_acquired`` signal, which tells the grant's ``acquired_at`` on the
database's clock (neither ``once_per`` nor a ``lock()`` handle says it)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from django.db import DatabaseError

from django_dlock import DlockError, LockExpired, LockNotAcquired, LockNotOwned, lock, once_per
from django_dlock import throttle as throttle_of
from django_dlock.models import DistributedLock
from django_dlock.signals import lock_acquired
from tools.torture.history import error_fields, iso, lock_fields, now, pause
from tools.torture.operations import Operations
from tools.torture.sections import MIN_HOLD, ONCE_PER

__all__ = ["MIN_HOLD", "ONCE_PER", "every_paced_call", "use", "window"]
_MICROSECOND = timedelta(microseconds=1)


def use(ops: Operations, key: str, rate: str) -> None:
    """One ``throttle(key, rate).try_use()``: its decision (``granted``, ``at``
    on the database's clock, ``retry_after`` in microseconds, ``remaining``)."""

    def decide() -> dict[str, Any]:
        decision = throttle_of(key, rate).try_use()
        return {
            "granted": decision.granted,
            "at": iso(decision.at),
            "retry_after": decision.retry_after // _MICROSECOND,
            "remaining": decision.remaining,
            "limit": decision.rate.limit,
            "period": decision.rate.period // _MICROSECOND,
        }

    ops.call("throttle", decide, key=key, rate=rate)


def window(
    ops: Operations, resource: str, every: float, body: float, kind: str, ttl: float
) -> None:
    """One run of ``kind``: ``once_per(resource, every)``, or ``lock(resource,
    ttl=ttl, min_hold=every)`` without waiting; a body of ``body`` seconds when
    due. Recorded once it ends: ``due``, the grant (``lock``, from the
    ``lock_acquired`` signal, also when the run raised later), and ``error`` (a
    database error) or ``lost`` (its exit found the lock gone)."""
    t0 = now()
    ops.ops += 1
    fields: dict[str, Any] = {"resource": resource, "every": every, "kind": kind}
    fields |= {"ttl": every if kind == ONCE_PER else ttl}
    with _grants(resource) as granted:
        try:
            fields["due"] = _run(resource, every, body, kind, ttl)
        except (LockExpired, LockNotOwned) as error:
            fields["lost"] = type(error).__name__
        except (DatabaseError, DlockError) as error:
            fields["error"] = error_fields(error)
    if granted:
        fields["lock"] = granted[-1]
    ops.recorder.write("once_per", t0=t0, t1=now(), **fields)
    if fields.get("error", {}).get("db"):
        ops.reset()  # as ``Operations.call`` does: the next call reconnects


def _run(resource: str, every: float, body: float, kind: str, ttl: float) -> bool:
    if kind == ONCE_PER:
        with once_per(resource, every) as due:
            if due:
                pause(body)
        return due
    try:
        with lock(resource, ttl=ttl, min_hold=every):
            pause(body)
    except LockNotAcquired:
        return False
    return True


@contextlib.contextmanager
def _grants(resource: str) -> Iterator[list[dict[str, Any]]]:
    """The holds of ``resource`` granted in this thread meanwhile, as the
    history keeps them (the signal goes out once the grant is committed)."""
    thread = threading.get_ident()
    granted: list[dict[str, Any]] = []

    def receiver(sender: Any, lock: Any, **kwargs: Any) -> None:
        if threading.get_ident() == thread and lock.resource == resource:
            fields = lock_fields(lock)
            if fields is not None:
                granted.append(fields)

    lock_acquired.connect(receiver, sender=DistributedLock, weak=False)
    try:
        yield granted
    finally:
        lock_acquired.disconnect(receiver, sender=DistributedLock)


def every_paced_call(ops: Operations, free: str) -> None:
    """Each paced call once, on names never used (the read-only fault's
    victim: each has to write, so each must raise)."""
    use(ops, f"{free}:throttle", "5/m")
    window(ops, f"{free}:once", 5.0, 0, ONCE_PER, 5.0)
    window(ops, f"{free}:min-hold", 5.0, 0, MIN_HOLD, 5.0)
