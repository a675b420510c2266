"""The calls a torture process makes, each recorded in its history: the lock
API's operations and critical sections guarded by the fenced store. Only the
package's public API is used."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable
from io import StringIO
from typing import Any

from django.core.management import call_command
from django.db import DatabaseError, connections

from django_dlock import LockExpired, LockNotAcquired, LockNotOwned, lock
from django_dlock.models import DistributedLock, ReleaseResult
from tests.torture.history import Recorder, error_fields, iso, lock_fields, now, pause
from tests.torture.store import Store

Outcome = dict[str, Any]


class Operations:
    """One process's calls. After a database error the connection is closed, so
    the next call reconnects (as a request boundary would in a web process)."""

    def __init__(self, recorder: Recorder, store: Store, rng: random.Random) -> None:
        self.recorder = recorder
        self.store = store
        self.rng = rng
        self.name = recorder.process
        self.sections = 0
        self.ops = 0
        self.writes = 0

    # -- single calls ----------------------------------------------------------------

    def call(self, op: str, function: Callable[[], Outcome], **fields: Any) -> Outcome | None:
        """Run ``function`` (which returns the outcome's fields) and record it."""
        t0 = now()
        self.ops += 1
        try:
            outcome = function()
        except (DatabaseError, DistributedLock.DoesNotExist) as error:
            self.recorder.write(op, t0=t0, t1=now(), error=error_fields(error), **fields)
            if isinstance(error, DatabaseError):
                self.reset()
            return None
        self.recorder.write(op, t0=t0, t1=now(), **fields, **outcome)
        return outcome

    def reset(self) -> None:
        with contextlib.suppress(DatabaseError):  # a broken connection is closed anyway
            connections["default"].close()
        pause(0.05)  # during an outage, do not spin

    def acquire(self, resource: str, owner: str, ttl: float) -> Outcome | None:
        manager = DistributedLock.objects
        return self.call(
            "acquire",
            lambda: {"lock": lock_fields(manager.acquire(resource, owner=owner, ttl=ttl))},
            resource=resource,
            owner=owner,
            ttl=ttl,
        )

    def renew(self, resource: str, owner: str, ttl: float, cs: str | None = None) -> Outcome | None:
        extra = {"cs": cs} if cs else {}
        return self.call(
            "renew",
            lambda: {"lock": lock_fields(DistributedLock.objects.renew(resource, owner, ttl))},
            resource=resource,
            owner=owner,
            ttl=ttl,
            **extra,
        )

    def release(self, resource: str, owner: str, cs: str | None = None) -> Outcome | None:
        extra = {"cs": cs} if cs else {}
        return self.call(
            "release",
            lambda: {"result": DistributedLock.objects.release(resource, owner).value},
            resource=resource,
            owner=owner,
            **extra,
        )

    def force_release(self, resource: str) -> Outcome | None:
        return self.call(
            "force_release",
            lambda: {"released": DistributedLock.objects.force_release(resource)},
            resource=resource,
        )

    def purge(self, command: bool) -> Outcome | None:
        def run() -> Outcome:
            if command:
                call_command("purge_locks", stdout=StringIO())
                return {"deleted": None}
            return {"deleted": DistributedLock.objects.purge_expired()}

        return self.call("purge", run, command=command)

    # -- critical sections -----------------------------------------------------------

    def manager_section(self, resource: str, ttl: float, body: float) -> None:
        """acquire, a critical section (maybe renewing once), release."""
        owner = f"{self.name}.{self.ops}"
        t0 = now()
        outcome = self.acquire(resource, owner, ttl)
        if not outcome or not outcome["lock"]:
            return
        fields = outcome["lock"]
        cs = self.enter(resource, fields, t0)
        deadline = t0 + ttl  # the holder's own view of expiry, as lock()'s handle keeps it
        self.guarded_work(cs, resource, fields["token"], body, lambda: now() >= deadline)
        expires_at = fields["expires_at"]
        if self.rng.random() < 0.3:
            renewed_at = now()
            renewed = self.renew(resource, owner, ttl, cs=cs)
            if renewed and renewed["lock"]:
                deadline, expires_at = renewed_at + ttl, renewed["lock"]["expires_at"]
                self.guarded_work(cs, resource, fields["token"], 0, lambda: now() >= deadline)
            else:
                self.told(cs, "renew failed")
        if now() >= deadline:
            self.told(cs, "its deadline passed")
        self.recorder.write("cs_exit", cs=cs, t=now(), expires_at=expires_at)
        released = self.release(resource, owner, cs=cs)
        if not released:
            self.told(cs, "release failed")
        elif released["result"] != ReleaseResult.RELEASED.value:
            self.told(cs, f"release: {released['result']}")

    def lock_section(
        self, resource: str, ttl: float, body: float, timeout: float | None, auto_renew: bool
    ) -> None:
        """``with lock(...)``: a critical section of ``body`` seconds."""
        owner = f"{self.name}.{self.ops}"
        context = lock(resource, owner=owner, ttl=ttl, timeout=timeout, auto_renew=auto_renew)
        fields = {"resource": resource, "owner": owner, "ttl": ttl, "timeout": timeout}
        entered = self.enter_lock(context, fields)
        if entered is None:
            return
        handle, cs, t0 = entered
        self.guarded_work(cs, resource, handle.fencing_token, body, handle.lost.is_set)
        self.leave_lock(context, handle, cs)

    def enter_lock(self, context: lock, fields: dict[str, Any]) -> tuple[Any, str, float] | None:
        t0 = now()
        self.ops += 1
        try:
            handle = context.__enter__()
        except (DatabaseError, LockNotAcquired) as error:
            self.recorder.write("lock", t0=t0, t1=now(), error=error_fields(error), **fields)
            if isinstance(error, DatabaseError):
                self.reset()
            return None
        expires_at = handle.expires_at
        acquired_at = expires_at - _seconds(fields["ttl"])  # a fresh acquisition: now + ttl
        lock_event = {"owner": handle.owner, "token": handle.fencing_token}
        lock_event |= {"acquired_at": None, "expires_at": iso(expires_at)}
        self.recorder.write("lock", t0=t0, t1=now(), lock=lock_event, **fields)
        cs = self.enter(fields["resource"], {**lock_event, "acquired_at": iso(acquired_at)}, t0)
        return handle, cs, t0

    def leave_lock(self, context: lock, handle: Any, cs: str) -> None:
        self.recorder.write("cs_exit", cs=cs, t=now(), expires_at=iso(handle.expires_at))
        t0 = now()
        fields = {"cs": cs, "resource": handle.resource, "owner": handle.owner}
        try:
            context.__exit__(None, None, None)
        except (LockExpired, LockNotOwned) as error:
            result = "expired" if isinstance(error, LockExpired) else "not_owned"
            self.recorder.write("unlock", t0=t0, t1=now(), result=result, **fields)
            self.told(cs, f"unlock: {result}")
        except DatabaseError as error:
            self.recorder.write("unlock", t0=t0, t1=now(), error=error_fields(error), **fields)
            self.told(cs, "release failed")
            self.reset()
        else:
            self.recorder.write("unlock", t0=t0, t1=now(), result="released", **fields)
        if handle.lost.is_set():
            self.told(cs, f"lost: {handle.lost_reason}")

    def enter(self, resource: str, fields: dict[str, Any], acquire_t0: float) -> str:
        self.sections += 1
        cs = f"{self.name}:{self.sections}"
        self.recorder.write(
            "cs_enter",
            cs=cs,
            t=now(),
            resource=resource,
            owner=fields["owner"],
            token=fields["token"],
            acquired_at=fields["acquired_at"],
            expires_at=fields["expires_at"],
            acquire_t0=acquire_t0,
        )
        return cs

    def told(self, cs: str, how: str) -> None:
        self.recorder.write("cs_told", cs=cs, t=now(), how=how)

    def guarded_work(
        self, cs: str, resource: str, token: int, body: float, lost: Callable[[], bool]
    ) -> None:
        """Write to the guarded store, then work for ``body`` seconds, writing again
        every second of it; a holder that knows its lock is lost stops writing."""
        while True:
            if lost():
                self.told(cs, "lost")
                return
            self.fenced_write(cs, resource, token)
            step = min(body, 1.0)
            if step <= 0:
                return
            pause(step)
            body -= step

    def fenced_write(self, cs: str, resource: str, token: int) -> bool | None:
        self.writes += 1
        write_id = f"{cs}#{self.writes}"
        t0 = now()
        try:
            counter = self.store.read_counter(resource)
            pause(self.rng.uniform(0, 0.001))  # widen the read-modify-write window
            accepted = self.store.write(resource, token, write_id, counter + 1)
        except Exception as error:  # the store's database failed: the log knows the answer
            self.recorder.write(
                "cs_write", cs=cs, write_id=write_id, token=token, t0=t0, t1=now(),
                error=error_fields(error),
            )  # fmt: skip
            return None
        self.recorder.write(
            "cs_write", cs=cs, write_id=write_id, token=token, t0=t0, t1=now(), accepted=accepted
        )
        return accepted


def _seconds(ttl: float) -> Any:
    from datetime import timedelta

    return timedelta(seconds=ttl)
