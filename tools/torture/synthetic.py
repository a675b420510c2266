"""Synthetic torture histories for the checker's unit tests: the events a
holder of each kind would record, with the monotonic time of the history and
the database's clock made one (t seconds after ``START``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from tools.torture.checker import check

START = datetime(2026, 1, 1, tzinfo=UTC)
Events = list[dict[str, Any]]


def at(seconds: float) -> str:
    """A database-clock time, ``seconds`` after the start (monotonic time t = seconds)."""
    return (START + timedelta(seconds=seconds)).isoformat()


def holder(
    process: str,
    token: int,
    enter: float,
    leave: float | None,
    *,
    ttl: float = 10,
    resource: str = "r",
    writes: tuple[tuple[float, bool], ...] = (),
    reads: tuple[tuple[float, bool], ...] = (),
    told: bool = False,
    released: str = "released",
    kind: str = "exclusive",
    limit: int | None = None,
    t0: float | None = None,
    lock_delay: float | None = None,
) -> Events:
    """The events of one holder: acquire at ``enter`` (database clock = monotonic
    time; the call began at ``t0``, by default just before), a critical section
    of ``kind`` (exclusive, shared, permit or leader) with its writes and reads,
    and (unless ``leave`` is None) its exit and release. An exclusive holder
    may ask for a ``lock_delay``."""
    owner = f"{process}.{token}"
    cs = f"{process}:{token}"
    mode = "exclusive" if kind in ("exclusive", "leader") else "shared"
    lock = {"owner": owner, "token": token, "acquired_at": at(enter), "expires_at": at(enter + ttl)}
    lock |= {"mode": mode, "hold_count": 1}
    call = {"resource": resource, "owner": owner}
    asked: dict[str, Any] = {"shared": kind == "shared", "limit": limit}
    if kind == "leader":
        asked |= {"leader": True, "timeout": float("inf")}
    if lock_delay is not None:
        asked |= {"lock_delay": lock_delay}
    start = enter - 0.01 if t0 is None else t0
    op = "lock" if kind == "leader" else "acquire"
    events: Events = [
        {"p": process, "op": op, "t0": start, "t1": enter, "ttl": ttl, "lock": lock} | call | asked,
        {"p": process, "op": "cs_enter", "cs": cs, "t": enter, "token": token}
        | {"acquired_at": lock["acquired_at"], "expires_at": lock["expires_at"]}
        | {"acquire_t0": start, "kind": kind, "limit": limit}
        | call,
    ]
    for n, (t, accepted) in enumerate(writes, 1):
        events.append(
            {"p": process, "op": "cs_write", "cs": cs, "write_id": f"{cs}#{n}", "token": token}
            | {"t0": t, "t1": t + 0.001, "accepted": accepted}
        )
    for t, accepted in reads:
        events.append(
            {"p": process, "op": "cs_read", "cs": cs, "token": token, "t0": t, "t1": t + 0.001}
            | {"accepted": accepted, "counter": 0}
        )
    if told:
        events.append({"p": process, "op": "cs_told", "cs": cs, "t": enter + ttl, "how": "lost"})
    if leave is not None:
        events.append({"p": process, "op": "cs_exit", "cs": cs, "t": leave})
        events.append(
            {"p": process, "op": "release", "cs": cs, "t0": leave, "t1": leave + 0.01}
            | {"result": released}
            | call
        )
    return events


def reader(process: str, token: int, enter: float, leave: float | None, **kwargs: Any) -> Events:
    return holder(process, token, enter, leave, kind="shared", **kwargs)


def permit(
    process: str, token: int, enter: float, leave: float | None, limit: int = 2, **kwargs: Any
) -> Events:
    return holder(
        process, token, enter, leave, kind="permit", limit=limit, resource="sem", **kwargs
    )


def invariants(events: Events) -> list[int]:
    return [violation.invariant for violation in check(events)]


def fault(**fields: Any) -> dict[str, Any]:
    return {
        "p": "runner",
        "op": "fault",
        "kind": "restart (immediate)",
        "t0": 10,
        "t1": 20,
    } | fields


def force_release(t0: float, t1: float, **fields: Any) -> dict[str, Any]:
    """An operator's force-release of resource ``r`` that released something."""
    event = {"p": "op", "op": "force_release", "resource": "r", "t0": t0, "t1": t1}
    return event | {"released": True} | fields


def store_final(counter: int, rows: list[tuple[int, int, str, int]]) -> dict[str, Any]:
    return {
        "p": "runner",
        "op": "store_final",
        "resources": {"r": {"max_token": max((r[1] for r in rows), default=0), "counter": counter}},
        "log": [[n, "r", token, write_id, value] for n, token, write_id, value in rows],
    }


def snapshot(
    t: float, rows: list[dict[str, Any]], holds: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    event = {"p": "runner", "op": "snapshot", "t0": t, "t1": t + 0.01, "now": at(t), "rows": rows}
    return event if holds is None else event | {"holds": holds}


def use(
    process: str,
    t: float,
    granted: bool,
    *,
    key: str = "k",
    limit: int = 3,
    period: float = 2,
    retry_after: float = 0,
    remaining: int = 0,
) -> dict[str, Any]:
    """A throttle's decision at ``t`` (database clock = monotonic time) under
    ``limit`` per ``period`` seconds."""
    return {
        "p": process,
        "op": "throttle",
        "key": key,
        "rate": f"{limit}/{period:g}s",
        "t0": t - 0.001,
        "t1": t + 0.001,
        "granted": granted,
        "at": at(t),
        "retry_after": round(retry_after * 1e6),
        "remaining": remaining,
        "limit": limit,
        "period": round(period * 1e6),
    }


def uses(times: list[float], *, limit: int = 3, period: float = 2) -> Events:
    """Grants at ``times``, each answering the room left as a correct throttle would."""
    events: Events = []
    for n, t in enumerate(times):
        before = sum(1 for earlier in times[:n] if t - period < earlier < t)
        remaining = limit - 1 - before
        events.append(use(f"p{n}", t, True, limit=limit, period=period, remaining=remaining))
    return events


def window_run(
    process: str,
    granted_at: float | None,
    *,
    every: float = 1,
    kind: str = "once_per",
    ttl: float | None = None,
    resource: str = "once",
    **fields: Any,
) -> dict[str, Any]:
    """A ``once_per`` (or ``min_hold``) run: granted at ``granted_at`` (not
    due when None)."""
    event = {"p": process, "op": "once_per", "resource": resource, "every": every, "kind": kind}
    event |= {"ttl": every if ttl is None else ttl, "due": granted_at is not None}
    if granted_at is None:
        return event | {"t0": 0, "t1": 0.01} | fields
    lock = {"owner": f"{process}.1", "token": 1, "acquired_at": at(granted_at)}
    lock |= {"expires_at": at(granted_at + every), "mode": "exclusive", "hold_count": 1}
    return event | {"t0": granted_at - 0.01, "t1": granted_at + 0.05, "lock": lock} | fields


def waiter(
    process: str,
    token: int | None,
    queued: float | None,
    granted: float,
    leave: float | None = None,
    *,
    priority: int = 0,
    timeout: float = 5,
    t0: float | None = None,
    ttl: float = 10,
    resource: str = "r",
) -> Events:
    """A ``lock(priority=...)`` wait of ``process``: its ticket queued at
    ``queued`` (database clock read 1 ms before and at that moment; None: it
    found the lock free and took it at once), its call ending at ``granted``
    with ``token`` (None: timed out), and its section left and released at
    ``leave`` (None: never)."""
    owner = f"{process}.{token or 0}"
    start = (granted - 0.5 if queued is None else queued - 0.01) if t0 is None else t0
    call = {"resource": resource, "owner": owner}
    events: Events = []
    if queued is not None:
        events.append(
            {"p": process, "op": "queued", "t": queued, "mode": "exclusive"}
            | {"priority": priority, "db0": at(queued - 0.001), "db1": at(queued)}
            | call
        )
    wait: dict[str, Any] = {"p": process, "op": "lock", "t0": start, "t1": granted, "ttl": ttl}
    wait |= {"timeout": timeout, "priority": priority} | call
    if token is None:
        error = {"class": "LockNotAcquired", "message": "timed out", "db": False}
        return [*events, wait | {"error": error}]
    lock = {"owner": owner, "token": token, "acquired_at": None}
    lock |= {"expires_at": at(granted + ttl), "mode": "exclusive"}
    cs = f"{process}:{token}"
    events += [
        wait | {"lock": lock},
        {"p": process, "op": "cs_enter", "cs": cs, "t": granted, "token": token}
        | {"acquired_at": at(granted), "expires_at": lock["expires_at"]}
        | {"acquire_t0": start, "kind": "exclusive"}
        | call,
    ]
    if leave is not None:
        events.append({"p": process, "op": "cs_exit", "cs": cs, "t": leave})
        events.append(
            {"p": process, "op": "unlock", "cs": cs, "t0": leave, "t1": leave + 0.01}
            | {"result": "released"}
            | call
        )
    return events
