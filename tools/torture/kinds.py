"""The lock kinds' critical sections, each recorded in the history as
``operations.py`` records the exclusive lock's: reentrant holds (the
manager's and nested ``lock(reentrant=True)``), a handle's upgrade and
downgrade, all-or-nothing sets (``acquire_all`` and ``lock([...])``) and a
leader's term (``lock(timeout=inf, auto_renew=True)``). Readers and permits
are the plain sections with ``Asked(shared=True)`` or ``Asked(limit=N)``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from django.db import DatabaseError

from django_dlock import DlockError, LockExpired, LockNotAcquired, lock
from django_dlock.models import DistributedLock, ReleaseResult
from tools.torture.asked import EXCLUSIVE, Asked
from tools.torture.forced import ForcedOperations
from tools.torture.history import error_fields, lock_fields, now, pause
from tools.torture.operations import fresh
from tools.torture.release_all import release_all_told


class KindOperations(ForcedOperations):
    """A torture process's calls, with the lock kinds'."""

    # -- reentrant -----------------------------------------------------------------------

    def reentrant_section(self, resource: str, ttl: float, depth: int, asked: Asked) -> None:
        """The manager's reentrant holds: acquire ``depth`` times (working between),
        then release as many times: DECREMENTED until the last, RELEASED."""
        asked = replace(asked, reentrant=True)
        owner = self.owner()
        entered = self._acquired(resource, owner, ttl, asked)
        if entered is None:
            return
        cs, fields, deadline = entered
        token, expires_at, taken = fields["token"], fields["expires_at"], 1
        while taken < depth:
            self.work(cs, asked, resource, token, self.rng.uniform(0, 0.002), past(deadline))
            again_at = now()
            again = self.acquire(resource, owner, ttl, asked)
            if not again or not again["lock"] or again["lock"]["token"] != token:
                self.told(cs, "re-entry found its hold lost")
                taken = 1 if again and again["lock"] else 0  # a new grant holds once
                break
            taken += 1
            deadline, expires_at = again_at + ttl, again["lock"]["expires_at"]
        self.work(cs, asked, resource, token, 0, lambda: now() >= deadline)
        if now() >= deadline:
            self.told(cs, "its deadline passed")
        self.recorder.write("cs_exit", cs=cs, t=now(), expires_at=expires_at)
        for left in range(taken - 1, -1, -1):
            released = self.release(resource, owner, cs=cs)
            expected = ReleaseResult.DECREMENTED if left else ReleaseResult.RELEASED
            if not released or released["result"] != expected.value:
                self.told(cs, f"release: {released and released['result']}")
                break

    def reentrant_lock(
        self, resource: str, ttl: float, depth: int, asked: Asked, timeout: float | None
    ) -> None:
        """``lock(reentrant=True)`` nested ``depth`` deep in one thread; at each
        depth ``holders()`` must show as many holds."""
        asked = replace(asked, reentrant=True)
        owner = self.owner()
        outer = lock(resource, owner=owner, ttl=ttl, timeout=timeout, **asked.arguments())
        fields = {"resource": resource, "owner": owner, "ttl": ttl, "timeout": timeout}
        entered = self.enter_lock(outer, fields | asked.fields(), asked)
        if entered is None:
            return
        handle, cs, _ = entered
        self.holders(resource, owner, cs=cs, depth=1)
        inner: list[lock] = []
        for level in range(2, depth + 1):
            self.work(cs, asked, resource, handle.fencing_token, 0, handle.lost.is_set)
            context = lock(resource, ttl=ttl, **asked.arguments())
            t0 = now()
            try:
                context.__enter__()
            except (DatabaseError, DlockError) as error:
                self.recorder.write(
                    "lock", t0=t0, t1=now(), error=error_fields(error), depth=level,
                    **fields, **asked.fields(),
                )  # fmt: skip
                self.told(cs, f"re-entry: {type(error).__name__}")
                if isinstance(error, DatabaseError):
                    self.reset()
                break
            inner.append(context)
            self.recorder.write(
                "lock", t0=t0, t1=now(), lock=self.handle_fields(handle), depth=level,
                **fields, **asked.fields(),
            )  # fmt: skip
            self.holders(resource, owner, cs=cs, depth=level)
        self.work(cs, asked, resource, handle.fencing_token, 0, handle.lost.is_set)
        for context in reversed(inner):
            self.leave_lock(context, handle, None, released="decremented")
        self.leave_lock(outer, handle, cs)

    # -- upgrade and downgrade ---------------------------------------------------------

    def mode_change_section(self, resource: str, ttl: float, timeout: float | None) -> None:
        """A ``lock()`` that starts shared (or exclusive), upgrades (downgrades)
        and changes back: each change a new grant with a new token, so each
        mode is a section of its own."""
        start_shared = self.rng.random() < 0.5
        asked = Asked(shared=start_shared)
        owner = self.owner()
        context = lock(resource, owner=owner, ttl=ttl, timeout=timeout, shared=start_shared)
        fields = {"resource": resource, "owner": owner, "ttl": ttl, "timeout": timeout}
        entered = self.enter_lock(context, fields | asked.fields(), asked)
        if entered is None:
            return
        handle, cs, _ = entered
        for _ in range(2):
            self.work(cs, asked, resource, handle.fencing_token, 0.002, handle.lost.is_set)
            change = "downgrade" if asked.shared is False else "upgrade"
            t0 = now()
            try:
                getattr(handle, change)()
            except LockNotAcquired as error:  # others read beside it: no upgrade
                self.recorder.write(change, t0=t0, t1=now(), error=error_fields(error), **fields)
                break
            except (LockExpired, DatabaseError) as error:
                self.recorder.write(change, t0=t0, t1=now(), error=error_fields(error), **fields)
                self.told(cs, f"{change}: {type(error).__name__}")
                if isinstance(error, DatabaseError):
                    self.reset()
                break
            lock_event = self.handle_fields(handle)
            self.recorder.write(change, t0=t0, t1=now(), lock=lock_event, **fields)
            self.recorder.write("cs_exit", cs=cs, t=t0)
            asked = Asked(shared=not asked.shared)
            cs = self.enter(resource, fresh(lock_event, ttl), t0, asked)
        self.work(cs, asked, resource, handle.fencing_token, 0, handle.lost.is_set)
        self.leave_lock(context, handle, cs)

    # -- several resources, all or none --------------------------------------------------

    def several_section(
        self, items: list[tuple[str, bool]], ttl: float, body: float, timeout: float | None
    ) -> None:
        """``acquire_all`` (``timeout`` None) or ``lock([...])`` of ``items``
        (resource, shared): every lock or none; a section per part; released
        together. One that took nothing is followed by ``holders()`` of each
        resource: none may show its owner."""
        owner = self.owner()
        resources = [resource for resource, _ in items]
        modes = ["shared" if shared else "exclusive" for _, shared in items]
        fields = {"resources": resources, "modes": modes, "owner": owner, "set": owner, "ttl": ttl}
        asked = [Asked(shared=shared) for _, shared in items]
        t0 = now()
        context, held = None, None
        if timeout is None:
            outcome = self.call(
                "acquire_all", lambda: self._acquire_all(items, owner, ttl), **fields
            )
            refused = outcome is not None and outcome["locks"] is None
            locks = outcome["locks"] if outcome else None
            deadline = t0 + ttl
            lost = lambda: now() >= deadline  # noqa: E731 - the holder's own view
        else:
            context = lock(
                list(zip(resources, modes, strict=True)), owner=owner, ttl=ttl, timeout=timeout
            )
            held, refused = self._enter_several(context, fields | {"timeout": timeout})
            locks = None if held is None else [self.handle_fields(h) for h in held.handles]
            lost = held.lost.is_set if held is not None else lost_never
        if refused:
            for resource in resources:
                self.holders(resource, owner, set=owner)
        if not locks:
            return
        parts = [
            self.enter(resource, _with_acquired_at(lock_event, ttl) | {"set": owner}, t0, kind)
            for resource, lock_event, kind in zip(resources, locks, asked, strict=True)
        ]
        for cs, resource, lock_event, kind in zip(parts, resources, locks, asked, strict=True):
            self.work(cs, kind, resource, lock_event["token"], 0, lost)
        pause(body)
        for cs, lock_event in zip(parts, locks, strict=True):
            self.recorder.write("cs_exit", cs=cs, t=now(), expires_at=lock_event["expires_at"])
        if context is not None:
            self._leave_several(context, held, parts, fields)
            return
        release_all_told(self.call, self.told, resources, owner, parts)

    def _acquire_all(self, items: list[tuple[str, bool]], owner: str, ttl: float) -> dict[str, Any]:
        asked = [(resource, "shared") if shared else resource for resource, shared in items]
        holds = DistributedLock.objects.acquire_all(asked, owner=owner, ttl=ttl)
        return {"locks": None if holds is None else [lock_fields(hold) for hold in holds]}

    def _enter_several(self, context: lock, fields: dict[str, Any]) -> tuple[Any, bool]:
        """The ``HeldLocks`` of ``lock([...])``, or None; and whether it was refused."""
        t0 = now()
        self.ops += 1
        try:
            held = context.__enter__()
        except (DatabaseError, DlockError) as error:
            self.recorder.write("lock_all", t0=t0, t1=now(), error=error_fields(error), **fields)
            if isinstance(error, DatabaseError):
                self.reset()
            return None, isinstance(error, LockNotAcquired)
        locks = [self.handle_fields(handle) for handle in held.handles]
        self.recorder.write("lock_all", t0=t0, t1=now(), locks=locks, **fields)
        return held, False

    def _leave_several(
        self, context: lock, held: Any, parts: list[str], fields: dict[str, Any]
    ) -> None:
        t0 = now()
        fields = {key: fields[key] for key in ("resources", "owner", "set")}
        try:
            context.__exit__(None, None, None)
        except DatabaseError as error:
            self.recorder.write("unlock_all", t0=t0, t1=now(), error=error_fields(error), **fields)
            for cs in parts:
                self.told(cs, "release failed")
            self.reset()
            return
        except DlockError:  # LockExpired or LockNotOwned: the handles say which
            pass
        results = ["lost" if handle.lost.is_set() else "released" for handle in held.handles]
        self.recorder.write("unlock_all", t0=t0, t1=now(), results=results, **fields)
        for cs, handle in zip(parts, held.handles, strict=True):
            if handle.lost.is_set():
                self.told(cs, f"lost: {handle.lost_reason}")

    # -- leaders ---------------------------------------------------------------------------

    def leader_term(
        self, resource: str, ttl: float, term: float, timeout: float = float("inf")
    ) -> None:
        """Campaign without end (``lock(timeout=inf, auto_renew=True)``), lead
        for ``term`` seconds writing with the term as the token (stopping at
        once when the lease is lost), then resign."""
        self.lock_section(resource, ttl, term, timeout, auto_renew=True, asked=Asked(leader=True))


def past(deadline: float) -> Callable[[], bool]:
    """Whether ``deadline`` (monotonic) has passed: a manager holder's own view."""
    return lambda: now() >= deadline


def lost_never() -> bool:
    return False


def _with_acquired_at(lock_event: dict[str, Any], ttl: float) -> dict[str, Any]:
    """The manager says when a hold was acquired; ``lock()``'s handle does not."""
    return lock_event if lock_event.get("acquired_at") else fresh(lock_event, ttl)


__all__ = ["EXCLUSIVE", "Asked", "KindOperations"]
