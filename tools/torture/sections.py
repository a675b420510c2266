"""The history read back as the checker needs it: critical sections,
acquisitions and the guarded store's log, each with its events. A call on
several resources (``acquire_all``, ``lock([...])`` and their releases) is
read as one call per resource, each pointing at the whole (``of``)."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from tools.torture.history import Event

# The calls of the lock API that a database fault must make raise.
LOCK_OPS = frozenset(
    {
        "acquire", "renew", "release", "force_release", "purge", "lock", "unlock",
        "acquire_all", "lock_all", "release_all", "unlock_all", "upgrade", "downgrade",
        "throttle", "once_per",
    }
)  # fmt: skip
# The per-resource calls that grant a hold.
ACQUIRING = frozenset({"acquire", "lock", "upgrade", "downgrade"})
# A call on several resources, and the per-resource call it is read as.
SEVERAL = {"acquire_all": "acquire", "lock_all": "lock", "release_all": "release"}
SEVERAL |= {"unlock_all": "unlock"}
EXCLUSIVE = "exclusive"
SHARED = "shared"
PERMIT = "permit"
LEADER = "leader"
# The runs of a window held at least ``every`` after its grant (``once_per`` events).
ONCE_PER = "once_per"
MIN_HOLD = "min_hold"


def when(value: str) -> datetime:
    return datetime.fromisoformat(value)


def per_resource(event: Event) -> list[Event]:
    """``event`` as one call per resource (itself, unless on several)."""
    op = SEVERAL.get(event["op"])
    if op is None:
        return [event]
    several = ("resources", "modes", "locks", "results")
    base = {key: value for key, value in event.items() if key not in several}
    calls = []
    for n, resource in enumerate(event["resources"]):
        one = base | {"op": op, "resource": resource, "of": event}
        if "modes" in event:
            one["shared"] = event["modes"][n] == SHARED
        if "locks" in event:
            one["lock"] = None if event["locks"] is None else event["locks"][n]
        if "results" in event:
            one["result"] = event["results"][n]
        calls.append(one)
    return calls


@dataclass
class Write:
    """One fenced write to the guarded store, and whether the store took it."""

    write_id: str
    t0: float
    t1: float
    accepted: bool | None  # None: the writer does not know (error, or killed)
    event: Event | None


@dataclass
class Read:
    """A reader's fenced read of the guarded store: refused once a writer with
    a larger token has written; an accepted one raises the store's largest
    token seen to the reader's, so that an older writer's writes are refused."""

    t0: float
    t1: float
    accepted: bool | None  # None: an error
    counter: int | None
    event: Event


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
    kind: str = EXCLUSIVE  # exclusive, shared (a reader), permit or leader
    limit: int | None = None  # a permit's semaphore
    set: str | None = None  # the all-or-nothing call it is part of
    writes: list[Write] = field(default_factory=list)
    reads: list[Read] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)

    @property
    def exclusive(self) -> bool:
        return self.kind in (EXCLUSIVE, LEADER)

    def first_access(self) -> float:
        """When the store first took this holder's token (an accepted write or read)."""
        writes = (w.t1 for w in self.writes if w.accepted)
        reads = (r.t1 for r in self.reads if r.accepted)
        return min((*writes, *reads), default=math.inf)

    def accesses_after(self, t: float) -> int:
        """How many of its writes and reads the store accepted that began after ``t``."""
        late = [w for w in self.writes if w.t0 > t and w.accepted]
        return len(late) + sum(1 for r in self.reads if r.t0 > t and r.accepted)


@dataclass
class Acquisition:
    """A successful acquisition (``acquire``, entering ``lock()``, a part of
    an all-or-nothing call, an upgrade or a downgrade)."""

    resource: str
    owner: str
    token: int
    acquired_at: datetime | None  # None: lock() does not say
    expires_at: datetime
    t0: float
    t1: float
    event: Event
    mode: str = EXCLUSIVE
    hold_count: int | None = None  # None: not said (lock())
    regrant: bool = False  # the holder again, with the token it had (see ``read``)


@dataclass
class History:
    events: list[Event]
    sections: dict[str, Section]
    acquisitions: dict[str, list[Acquisition]]  # by resource
    calls: dict[str, list[Event]]  # lock API calls by resource
    deaths: dict[str, float]  # process -> when it was killed
    log: dict[str, tuple[int, str, int, str, int]] | None  # write_id -> store log row
    store: Event | None
    leaders: set[str] = field(default_factory=set)  # resources that leaders campaign for


def read(events: list[Event]) -> History:
    sections: dict[str, Section] = {}
    acquisitions: dict[str, list[Acquisition]] = defaultdict(list)
    calls: dict[str, list[Event]] = defaultdict(list)
    deaths: dict[str, float] = {}
    leaders: set[str] = set()
    store: Event | None = None
    for event in events:
        op = event["op"]
        if op == "killed":
            deaths[event["target"]] = event["t"]
        elif op == "store_final":
            store = event
        elif op in LOCK_OPS:
            for call in per_resource(event):
                if "resource" in call:
                    calls[call["resource"]].append(call)
                if call["op"] in ACQUIRING and call.get("lock"):
                    acquisitions[call["resource"]].append(_acquisition(call))
                    if call.get("leader"):
                        leaders.add(call["resource"])
    for resource_acquisitions in acquisitions.values():
        _mark_regrants(resource_acquisitions)
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
                kind=event.get("kind", EXCLUSIVE),
                limit=event.get("limit"),
                set=event.get("set"),
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
        _add(section, event)
    for section in sections.values():
        if math.isinf(section.end) and section.process in deaths:
            section.end = deaths[section.process]
    if log is not None:
        _resolve_writes(sections, log)
    return History(events, sections, dict(acquisitions), dict(calls), deaths, log, store, leaders)


def _acquisition(call: Event) -> Acquisition:
    lock = call["lock"]
    acquired_at = lock.get("acquired_at")
    shared = call.get("shared") or call.get("limit") is not None
    return Acquisition(
        resource=call["resource"],
        owner=lock["owner"],
        token=lock["token"],
        acquired_at=when(acquired_at) if acquired_at else None,
        expires_at=when(lock["expires_at"]),
        t0=call["t0"],
        t1=call["t1"],
        event=call,
        mode=lock.get("mode") or (SHARED if shared else EXCLUSIVE),
        hold_count=lock.get("hold_count"),
    )


def _mark_regrants(acquisitions: list[Acquisition]) -> None:
    """An acquisition that returns a token its owner got before is the holder
    again (a re-acquire, a reentrant hold more): no new grant."""
    granted: set[tuple[str, int]] = set()
    for acquisition in sorted(acquisitions, key=lambda a: a.t1):
        key = (acquisition.owner, acquisition.token)
        acquisition.regrant = key in granted
        granted.add(key)


def _add(section: Section, event: Event) -> None:
    """One event of ``section`` after its entry."""
    op = event["op"]
    if op == "cs_write":
        accepted = event.get("accepted")
        section.writes.append(Write(event["write_id"], event["t0"], event["t1"], accepted, event))
    elif op == "cs_read":
        section.reads.append(
            Read(event["t0"], event["t1"], event.get("accepted"), event.get("counter"), event)
        )
    elif op == "cs_told":
        section.told = True
    elif op == "cs_exit":
        section.end = event["t"]
        if event.get("expires_at"):
            section.expires_at = max(section.expires_at, when(event["expires_at"]))
    elif op == "renew" and event.get("lock"):
        section.expires_at = max(section.expires_at, when(event["lock"]["expires_at"]))


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
