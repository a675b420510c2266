"""Critical sections of issue 36's ways to wait and hold, each recorded in the
history as ``operations.py`` records a ``lock()`` section: a hold bound to the
caller's transaction (``lock(..., until="commit")``), and two holders that
cross (one takes a then b, the other b then a), of which the deadlock check
makes one give up. The existing invariants judge them: no exclusive hold
overlaps another (1), and tokens (2, 3)."""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Iterator
from typing import Any

from django.db import DatabaseError, transaction

from django_dlock import DlockError, lock
from django_dlock.signals import lock_released
from tools.torture.asked import EXCLUSIVE
from tools.torture.db_clock import database_now
from tools.torture.history import error_fields, iso, now, pause
from tools.torture.operations import Operations, fresh

__all__ = ["commit_section", "crossed_sections"]

# How long (seconds) a rolled-back transaction's lock may take to be released:
# the library's watcher looks every 0.05 s, then releases on a connection of its own.
ROLLBACK_RELEASE = 2.0


class _RollBack(Exception):
    """Raised inside ``atomic()`` to roll the transaction back."""


def commit_section(
    ops: Operations, resource: str, ttl: float, body: float, timeout: float, rollback: bool
) -> None:
    """``with lock(resource, until="commit")`` inside ``transaction.atomic()``:
    writes in the block, and one more after it, before the transaction ends
    (rolled back with ``rollback``). The hold lasts until that end: the
    section's end (``cs_exit``) is recorded once the commit is done, by a
    callback of the transaction that runs before the lock's release (an
    earlier ``on_commit``), or as the rollback begins (the library releases
    the lock once it is done); the release (``unlock``) spans the commit, or
    the rollback and the release after it. Not on SQLite, which refuses it."""
    owner = ops.owner()
    fields = {"resource": resource, "owner": owner, "ttl": ttl, "timeout": timeout}
    fields |= {"until": "commit"}
    held: list[tuple[Any, str]] = []
    ended = math.inf

    def leave() -> None:  # the section's end, before its hold's
        for handle, cs in held:
            if handle.lost.is_set():
                ops.told(cs, f"lost: {handle.lost_reason}")
            ops.recorder.write("cs_exit", cs=cs, t=now(), expires_at=iso(handle.expires_at))

    with _released(owner) as released:
        try:
            with transaction.atomic():
                transaction.on_commit(leave, robust=True)  # ahead of the lock's own
                database_now()  # the transaction is open on the server before the lock is taken
                context = lock(resource, owner=owner, ttl=ttl, timeout=timeout, until="commit",
                               label=f"{ops.name} until commit")  # fmt: skip
                t0 = now()
                ops.ops += 1
                try:
                    handle = context.__enter__()
                except (DatabaseError, DlockError) as error:
                    ops.recorder.write("lock", t0=t0, t1=now(), error=error_fields(error), **fields)
                    raise _RollBack from error
                lock_event = ops.handle_fields(handle)
                ops.recorder.write("lock", t0=t0, t1=now(), lock=lock_event, **fields)
                cs = ops.enter(resource, fresh(lock_event, ttl), t0)
                held.append((handle, cs))
                ops.work(cs, EXCLUSIVE, resource, handle.fencing_token, body, handle.lost.is_set)
                context.__exit__(None, None, None)  # the block ends; the hold goes on
                pause(0.005)  # the rest of the transaction, which the lock still guards
                ops.work(cs, EXCLUSIVE, resource, handle.fencing_token, 0, handle.lost.is_set)
                ended = now()
                if rollback:
                    leave()
                    raise _RollBack
        except _RollBack:
            pass
        except DatabaseError:  # the commit failed: the library releases as after a rollback
            leave()
            ops.reset()
        if held:
            t0 = ended if math.isfinite(ended) else now()
            _record_end(ops, *held[0], t0, rollback, released)


def _record_end(
    ops: Operations, handle: Any, cs: str, t0: float, rolled_back: bool, released: threading.Event
) -> None:
    """The release once the transaction ended: the commit's (done when
    ``atomic()`` returns), or the rollback's (the library's watcher releases
    it soon after), as ``lock_released`` tells."""
    deadline = now() + ROLLBACK_RELEASE
    while not (released.is_set() or handle.lost.is_set()) and now() < deadline:
        pause(0.01)
    fields = {"cs": cs, "resource": handle.resource, "owner": handle.owner}
    # ``rolled_back`` also marks the library's own release, with no caller to
    # raise to: it logs a failed one (invariant 4 does not judge it).
    fields |= {"rolled_back": rolled_back}
    if released.is_set():
        ops.recorder.write("unlock", t0=t0, t1=now(), result="released", **fields)
        return
    if handle.lost.is_set():
        ops.recorder.write("unlock", t0=t0, t1=now(), result="expired", **fields)
        ops.told(cs, f"lost: {handle.lost_reason}")
        return
    # Not seen released: its outcome is unknown, as a release that raised.
    error = {"class": "Unseen", "message": "the release after the transaction was not seen"}
    ops.recorder.write("unlock", t0=t0, t1=now(), error=error | {"db": False}, **fields)
    ops.told(cs, "release not seen")


@contextlib.contextmanager
def _released(owner: str) -> Iterator[threading.Event]:
    """An event set when ``owner``'s lock is released (``lock_released``, sent
    by whichever thread of the library releases it)."""
    done = threading.Event()

    def receiver(sender: Any, owner: str, forced: bool = False, **kwargs: Any) -> None:
        if owner == mine and not forced:
            done.set()

    mine = owner
    lock_released.connect(receiver, weak=False)
    try:
        yield done
    finally:
        lock_released.disconnect(receiver)


def crossed_sections(
    ops: Operations, first: str, second: str, ttl: float, hold: float, timeout: float
) -> None:
    """``with lock(first): ... with lock(second): ...``, waiting for each, and
    holding ``first`` for ``hold`` seconds before asking for ``second``: a
    process that takes them the other way round at the same time closes a
    cycle, and one of the two raises ``LockDeadlock`` (a ``LockNotAcquired``),
    recorded as the failed acquisition of its second resource, and leaves its
    first."""
    outer = _enter(ops, first, ttl, timeout)
    if outer is None:
        return
    context, handle, cs = outer
    ops.work(cs, EXCLUSIVE, first, handle.fencing_token, hold, handle.lost.is_set)
    inner = _enter(ops, second, ttl, timeout)
    if inner is not None:
        inner_context, inner_handle, inner_cs = inner
        token = inner_handle.fencing_token
        ops.work(inner_cs, EXCLUSIVE, second, token, 0, inner_handle.lost.is_set)
        ops.leave_lock(inner_context, inner_handle, inner_cs)
    ops.work(cs, EXCLUSIVE, first, handle.fencing_token, 0, handle.lost.is_set)
    ops.leave_lock(context, handle, cs)


def _enter(
    ops: Operations, resource: str, ttl: float, timeout: float
) -> tuple[lock, Any, str] | None:
    owner = ops.owner()
    context = lock(resource, owner=owner, ttl=ttl, timeout=timeout, label=f"{ops.name} crossed")
    fields = {"resource": resource, "owner": owner, "ttl": ttl, "timeout": timeout}
    entered = ops.enter_lock(context, fields)
    if entered is None:
        return None
    handle, cs, _ = entered
    return context, handle, cs
