"""The calls a torture process makes, each recorded in its history: the lock
API's operations and critical sections guarded by the fenced store. Only the
package's public API is used (and Django's ``execute_wrapper``, to see when a
waiter's ticket entered the queue). An operator's force-release is in
``forced.py``, the lock kinds' own sections in ``kinds.py``."""

from __future__ import annotations

import contextlib
import random
import re
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from io import StringIO
from typing import Any

from django.core.management import call_command
from django.db import DatabaseError, connections, transaction

from django_dlock import DlockError, LockExpired, LockNotOwned, lock
from django_dlock.models import DistributedLock, LockWaiter, ReleaseResult
from tools.torture.asked import EXCLUSIVE, Asked
from tools.torture.db_clock import database_now
from tools.torture.history import Recorder, error_fields, iso, lock_fields, now, pause
from tools.torture.store import Store

# PostgreSQL's run of the prepared ticket INSERT by name (``backends.postgresql.prepared``:
# ``EXECUTE dlock_<process>_enqueue_<n>(...)``).
PREPARED_TICKET = re.compile(r"^EXECUTE dlock_\w+?_enqueue_\d+\(")

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
        except (DatabaseError, DistributedLock.DoesNotExist, DlockError) as error:
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

    def owner(self) -> str:
        return f"{self.name}.{self.ops}"

    def acquire(
        self, resource: str, owner: str, ttl: float, asked: Asked = EXCLUSIVE
    ) -> Outcome | None:
        manager = DistributedLock.objects
        return self.call(
            "acquire",
            lambda: {
                "lock": lock_fields(
                    manager.acquire(resource, owner=owner, ttl=ttl, **asked.arguments())
                )
            },
            resource=resource,
            owner=owner,
            ttl=ttl,
            **asked.fields(),
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

    def purge(self, command: bool) -> Outcome | None:
        def run() -> Outcome:
            if command:
                call_command("purge_locks", stdout=StringIO())
                return {"deleted": None}
            return {"deleted": DistributedLock.objects.purge_expired()}

        return self.call("purge", run, command=command)

    def holders(self, resource: str, owner: str, **fields: Any) -> list[dict[str, Any]] | None:
        """What ``holders()`` shows of ``resource`` now (recorded; not a lock call)."""
        t0 = now()
        try:
            holds = [
                {"owner": h.owner, "token": h.fencing_token, "hold_count": h.hold_count}
                | {"mode": h.mode}
                for h in DistributedLock.objects.holders(resource)
            ]
        except DatabaseError:
            self.reset()
            return None
        self.recorder.write(
            "holders", t0=t0, t1=now(), resource=resource, owner=owner, holds=holds, **fields
        )
        return holds

    # -- critical sections -----------------------------------------------------------

    def manager_section(
        self, resource: str, ttl: float, body: float, asked: Asked = EXCLUSIVE
    ) -> None:
        """acquire, a critical section (maybe renewing once), release."""
        owner = self.owner()
        entered = self._acquired(resource, owner, ttl, asked)
        if entered is None:
            return
        cs, fields, deadline = entered
        token = fields["token"]
        self.work(cs, asked, resource, token, body, lambda: now() >= deadline)
        expires_at = fields["expires_at"]
        if self.rng.random() < 0.3:
            renewed_at = now()
            renewed = self.renew(resource, owner, ttl, cs=cs)
            if renewed and renewed["lock"]:
                deadline, expires_at = renewed_at + ttl, renewed["lock"]["expires_at"]
                self.work(cs, asked, resource, token, 0, lambda: now() >= deadline)
            else:
                self.told(cs, "renew failed")
        self._leave(resource, owner, cs, deadline, expires_at)

    def reader_pair_section(self, resource: str, body: float) -> None:
        """A reader's section with another reader's (another owner) inside it: two
        readers that hold together whenever the second is admitted."""
        owner, asked = self.owner(), Asked(shared=True)
        entered = self._acquired(resource, owner, 2.0, asked)
        if entered is None:
            return
        cs, fields, deadline = entered
        self.work(cs, asked, resource, fields["token"], 0, lambda: now() >= deadline)
        self.manager_section(resource, 1.0, body, asked)
        self._leave(resource, owner, cs, deadline, fields["expires_at"])

    def _acquired(
        self, resource: str, owner: str, ttl: float, asked: Asked
    ) -> tuple[str, dict[str, Any], float] | None:
        """The manager's acquire and, when it took the lock, the section's entry:
        (its cs, the lock's fields, its deadline by the holder's own clock, as
        lock()'s handle keeps it)."""
        t0 = now()
        outcome = self.acquire(resource, owner, ttl, asked)
        if not outcome or not outcome["lock"]:
            return None
        fields = outcome["lock"]
        return self.enter(resource, fields, t0, asked), fields, t0 + ttl

    def _leave(self, resource: str, owner: str, cs: str, deadline: float, expires_at: Any) -> None:
        """The section's exit (told first if its deadline passed), then the release."""
        if now() >= deadline:
            self.told(cs, "its deadline passed")
        self.recorder.write("cs_exit", cs=cs, t=now(), expires_at=expires_at)
        self.release_section(resource, owner, cs)

    def release_section(self, resource: str, owner: str, cs: str) -> None:
        released = self.release(resource, owner, cs=cs)
        if not released:
            self.told(cs, "release failed")
        elif released["result"] != ReleaseResult.RELEASED.value:
            self.told(cs, f"release: {released['result']}")

    def lock_section(
        self,
        resource: str,
        ttl: float,
        body: float,
        timeout: float | None,
        auto_renew: bool,
        asked: Asked = EXCLUSIVE,
        priority: int | None = None,
    ) -> None:
        """``with lock(...)``: a critical section of ``body`` seconds (waiting
        with ``priority``, where given)."""
        owner = self.owner()
        ranked = {} if priority is None else {"priority": priority}
        context = lock(
            resource,
            owner=owner,
            ttl=ttl,
            timeout=timeout,
            auto_renew=auto_renew,
            label=f"{self.name} {asked.kind}",
            priority=priority or 0,  # (0: the default)
            **asked.arguments(),
        )
        fields = {"resource": resource, "owner": owner, "ttl": ttl, "timeout": timeout} | ranked
        entered = self.enter_lock(context, fields | asked.fields(), asked)
        if entered is None:
            return
        handle, cs, _ = entered
        self.work(cs, asked, resource, handle.fencing_token, body, handle.lost.is_set)
        self.leave_lock(context, handle, cs)

    def enter_lock(
        self, context: lock, fields: dict[str, Any], asked: Asked = EXCLUSIVE
    ) -> tuple[Any, str, float] | None:
        t0 = now()
        self.ops += 1
        try:
            with self.queue_watch(
                fields["resource"], fields["owner"], asked, fields.get("priority")
            ):
                handle = context.__enter__()
        except (DatabaseError, DlockError) as error:
            self.recorder.write("lock", t0=t0, t1=now(), error=error_fields(error), **fields)
            if isinstance(error, DatabaseError):
                self.reset()
            return None
        lock_event = self.handle_fields(handle)
        self.recorder.write("lock", t0=t0, t1=now(), lock=lock_event, **fields)
        cs = self.enter(fields["resource"], fresh(lock_event, fields["ttl"]), t0, asked)
        return handle, cs, t0

    def handle_fields(self, handle: Any) -> dict[str, Any]:
        """A ``lock()`` handle's hold as the history keeps it. Its ``acquired_at``
        is the grant's: not its expiry less the ttl, which a hand-over's short
        offer lease (``locking.told``) would put up to a second early."""
        fields = {"owner": handle.owner, "token": handle.fencing_token}
        return fields | {
            "acquired_at": iso(handle.acquired_at),
            "expires_at": iso(handle.expires_at),
            "mode": handle.mode,
        }

    @contextlib.contextmanager
    def queue_watch(
        self, resource: str, owner: str, asked: Asked, priority: int | None = None
    ) -> Iterator[None]:
        """Record ``queued`` once this thread's waiter ticket of ``resource`` is
        in the queue: its INSERT committed (autocommit; on SQLite the lock
        transaction around it, and a ticket rolled back with it is not
        recorded). A waiter with a ``priority`` records it too, and the
        database's clock read before the INSERT (``db0``) and after its commit
        (``db1``): its ticket's time lies between (``check_priorities``)."""
        # Only the ticket's INSERT: a waiter's take also names the waiters'
        # table (it leaves the queue in its statement), and is no queuing. On
        # PostgreSQL the INSERT is a prepared statement, run by its name after
        # its first run in a session (``PostgreSQLQueue._enqueue``).
        connection = connections["default"]
        insert = f"INSERT INTO {connection.ops.quote_name(LockWaiter._meta.db_table)}"
        mode = "shared" if asked.shared or asked.limit is not None else "exclusive"

        def watch(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
            if insert not in sql and not PREPARED_TICKET.search(sql):
                return execute(sql, params, many, context)
            timed = {} if priority is None else {"priority": priority, "db0": database_now()}
            result = execute(sql, params, many, context)

            def record() -> None:
                if timed:
                    # A clock that cannot be read leaves the ticket's time open
                    # (the checker skips it); the library's call goes on.
                    with contextlib.suppress(DatabaseError):
                        timed["db1"] = database_now()
                self.recorder.write(
                    "queued", t=now(), resource=resource, owner=owner, mode=mode, **timed
                )

            transaction.on_commit(record, using=connection.alias, robust=True)
            return result

        with connection.execute_wrapper(watch):
            yield

    def leave_lock(
        self, context: lock, handle: Any, cs: str | None, *, released: str = "released"
    ) -> bool:
        """Leave ``with lock()``; whether it left as it should (``released``:
        "decremented" for an inner reentrant exit)."""
        if cs is not None:
            self.recorder.write("cs_exit", cs=cs, t=now(), expires_at=iso(handle.expires_at))
        t0 = now()
        fields = {"cs": cs, "resource": handle.resource, "owner": handle.owner}
        done = False
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
            self.recorder.write("unlock", t0=t0, t1=now(), result=released, **fields)
            done = True
        if handle.lost.is_set():
            self.told(cs, f"lost: {handle.lost_reason}")
        return done

    def enter(
        self, resource: str, fields: dict[str, Any], acquire_t0: float, asked: Asked = EXCLUSIVE
    ) -> str:
        self.sections += 1
        cs = f"{self.name}:{self.sections}"
        extra = {"kind": asked.kind} | ({"limit": asked.limit} if asked.limit else {})
        extra |= {"set": fields["set"]} if fields.get("set") else {}
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
            **extra,
        )
        return cs

    def told(self, cs: str | None, how: str) -> None:
        if cs is not None:
            self.recorder.write("cs_told", cs=cs, t=now(), how=how)

    # -- what a holder does inside -----------------------------------------------------

    def work(
        self,
        cs: str,
        asked: Asked,
        resource: str,
        token: int,
        body: float,
        lost: Callable[[], bool],
    ) -> None:
        """``body`` seconds of work as the holder's kind does it: a writer (or
        leader) writes to the guarded store, a reader reads it, a permit's
        holder uses its slot; each stops once it knows its hold is lost."""
        while True:
            if lost():
                self.told(cs, "lost")
                return
            if asked.kind == "shared":
                self.fenced_read(cs, resource, token)
            elif asked.kind != "permit":
                self.fenced_write(cs, resource, token)
            step = min(body, 1.0 if asked.kind != "leader" else 0.1)
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

    def fenced_read(self, cs: str, resource: str, token: int) -> bool | None:
        t0 = now()
        try:
            accepted, counter = self.store.read(resource, token)
        except Exception as error:  # the store's database failed
            self.recorder.write(
                "cs_read", cs=cs, token=token, t0=t0, t1=now(), error=error_fields(error)
            )
            return None
        self.recorder.write(
            "cs_read", cs=cs, token=token, t0=t0, t1=now(), accepted=accepted, counter=counter
        )
        return accepted


def fresh(lock_event: dict[str, Any], ttl: float) -> dict[str, Any]:
    """A hold's fields with an ``acquired_at``: the one it has, else that of a
    fresh grant (its expiry less the ttl)."""
    if lock_event.get("acquired_at"):
        return lock_event
    expires_at = datetime.fromisoformat(lock_event["expires_at"])
    return lock_event | {"acquired_at": iso(expires_at - timedelta(seconds=ttl))}
