"""The history read back as the checker needs it: critical sections,
acquisitions and the guarded store's log, each with its events."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from tests.torture.history import Event

# The calls of the lock API that a database fault must make raise.
LOCK_OPS = frozenset({"acquire", "renew", "release", "force_release", "purge", "lock", "unlock"})


def when(value: str) -> datetime:
    return datetime.fromisoformat(value)


@dataclass
class Write:
    """One fenced write to the guarded store, and whether the store took it."""

    write_id: str
    t0: float
    t1: float
    accepted: bool | None  # None: the writer does not know (error, or killed)
    event: Event | None


@dataclass
class Section:
    """A critical section: from ``enter`` (its acquisition returned) to ``end``
    (its holder left it, was killed, or the history ended)."""

    cs: str
    process: str
    resource: str
    owner: str
    token: int
    acquire_t0: float
    enter: float
    acquired_at: datetime
    expires_at: datetime  # the latest known, after renewals
    end: float = math.inf
    told: bool = False
    writes: list[Write] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)


@dataclass
class Acquisition:
    """A successful acquisition (``acquire``, or entering ``lock()``)."""

    resource: str
    owner: str
    token: int
    acquired_at: datetime | None  # None: lock() does not say
    expires_at: datetime
    t0: float
    t1: float
    event: Event


@dataclass
class History:
    events: list[Event]
    sections: dict[str, Section]
    acquisitions: dict[str, list[Acquisition]]  # by resource
    calls: dict[str, list[Event]]  # lock API calls by resource
    deaths: dict[str, float]  # process -> when it was killed
    log: dict[str, tuple[int, str, int, str, int]] | None  # write_id -> store log row
    store: Event | None


def read(events: list[Event]) -> History:
    sections: dict[str, Section] = {}
    acquisitions: dict[str, list[Acquisition]] = defaultdict(list)
    calls: dict[str, list[Event]] = defaultdict(list)
    deaths: dict[str, float] = {}
    store: Event | None = None
    for event in events:
        op = event["op"]
        if op == "killed":
            deaths[event["target"]] = event["t"]
        elif op == "store_final":
            store = event
        elif op in LOCK_OPS:
            if "resource" in event:
                calls[event["resource"]].append(event)
            lock = event.get("lock")
            if op in ("acquire", "lock") and lock:
                acquired_at = lock.get("acquired_at")
                acquisitions[event["resource"]].append(
                    Acquisition(
                        resource=event["resource"],
                        owner=lock["owner"],
                        token=lock["token"],
                        acquired_at=when(acquired_at) if acquired_at else None,
                        expires_at=when(lock["expires_at"]),
                        t0=event["t0"],
                        t1=event["t1"],
                        event=event,
                    )
                )
    for event in events:
        if event["op"] == "cs_enter":
            sections[event["cs"]] = Section(
                cs=event["cs"],
                process=event["p"],
                resource=event["resource"],
                owner=event["owner"],
                token=event["token"],
                acquire_t0=event["acquire_t0"],
                enter=event["t"],
                acquired_at=when(event["acquired_at"]),
                expires_at=when(event["expires_at"]),
                events=[event],
            )
    log = None
    if store is not None:
        log = {row[3]: tuple(row) for row in store["log"]}
    for event in events:
        section = sections.get(event.get("cs", ""))
        if section is None or event["op"] == "cs_enter":
            continue
        section.events.append(event)
        op = event["op"]
        if op == "cs_write":
            accepted = event.get("accepted")
            section.writes.append(
                Write(event["write_id"], event["t0"], event["t1"], accepted, event)
            )
        elif op == "cs_told":
            section.told = True
        elif op == "cs_exit":
            section.end = event["t"]
            if event.get("expires_at"):
                section.expires_at = max(section.expires_at, when(event["expires_at"]))
        elif op == "renew" and event.get("lock"):
            section.expires_at = max(section.expires_at, when(event["lock"]["expires_at"]))
    for section in sections.values():
        if math.isinf(section.end) and section.process in deaths:
            section.end = deaths[section.process]
    if log is not None:
        _resolve_writes(sections, log)
    return History(events, sections, dict(acquisitions), dict(calls), deaths, log, store)


def _resolve_writes(
    sections: dict[str, Section], log: dict[str, tuple[int, str, int, str, int]]
) -> None:
    """Writes whose writer does not know the answer (it got an error, or was
    killed before it could record one) take it from the store's log."""
    recorded = {w.write_id for s in sections.values() for w in s.writes}
    for section in sections.values():
        for write in section.writes:
            if write.accepted is None:
                write.accepted = write.write_id in log
    for write_id in log.keys() - recorded:
        writer = sections.get(write_id.rpartition("#")[0])
        if writer is not None:  # written, then killed before recording it
            writer.writes.append(Write(write_id, writer.end, writer.end, True, None))
