"""What a ``mix`` worker does: random calls of every lock kind on a few
contended resources until its stop file exists. Each entry of ``MIX`` is a
weight and a call; the read-write resources take writers, readers, reentrant
holds, mode changes, all-or-nothing sets and writers with a lock-delay
(some of which overrun their ttl or are force-released), the semaphores take permits
(each its one limit), the leaders' resource terms; throttle keys take uses
(each its one rate), and resources of their own take ``once_per`` runs and
``lock(min_hold=...)`` (``paced.py``); waiters with priorities queue on one
of its own, writers hold until their transaction's commit, and pairs of
resources are taken in either order (``waits.py``)."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.db import connections

from tools.torture.asked import EXCLUSIVE, Asked
from tools.torture.guarded import guarded_writer
from tools.torture.kinds import KindOperations
from tools.torture.paced import MIN_HOLD, ONCE_PER, use, window
from tools.torture.waits import commit_section, crossed_sections

Config = dict[str, Any]
# The priorities of the waiters on the priorities' resource.
PRIORITIES = (-2, 0, 0, 3, 7)
Call = Callable[[KindOperations, random.Random, Config], None]


def _ttl(rng: random.Random) -> float:
    return rng.choice((0.5, 1.0, 2.0))


def _write(rng: random.Random) -> float:
    return rng.uniform(0, 0.003)


def _read(rng: random.Random) -> float:
    # Readers stay longer than writers, so that they meet each other: the
    # short profile (CI) fails when no two readers held together (invariant 7's
    # coverage), and with 5-40 ms some 23-second runs had none in about 100
    # reader sections.
    return rng.uniform(0.02, 0.08)


def _rw(rng: random.Random, config: Config) -> str:
    return str(rng.choice(config["resources"]))


def _semaphore(rng: random.Random, config: Config) -> tuple[str, int]:
    resource = rng.choice(sorted(config["semaphores"]))
    return resource, int(config["semaphores"][resource])


def writer(ops: KindOperations, rng: random.Random, config: Config) -> None:
    ops.manager_section(_rw(rng, config), _ttl(rng), _write(rng))


def queued_writer(ops: KindOperations, rng: random.Random, config: Config) -> None:
    ops.lock_section(_rw(rng, config), _ttl(rng), _write(rng), rng.uniform(0.2, 1.0), False)


def trying_writer(ops: KindOperations, rng: random.Random, config: Config) -> None:
    ops.lock_section(_rw(rng, config), _ttl(rng), _write(rng), None, False)


def renewed_writer(ops: KindOperations, rng: random.Random, config: Config) -> None:
    ops.lock_section(_rw(rng, config), 0.6, 1.0, 2.0, True)  # body longer than the ttl


def _delayed(rng: random.Random) -> tuple[Asked, float]:
    """A writer's ``lock_delay`` (0.2 to 0.5 s) and body: now and then longer
    than its 0.5 s ttl, so that its hold is lost (expires) and the delay runs."""
    body = 0.6 if rng.random() < 0.25 else _write(rng)
    return Asked(lock_delay=rng.choice((0.2, 0.3, 0.5))), body


def delayed_writer(ops: KindOperations, rng: random.Random, config: Config) -> None:
    asked, body = _delayed(rng)
    ops.manager_section(_rw(rng, config), 0.5, body, asked)


def delayed_lock(ops: KindOperations, rng: random.Random, config: Config) -> None:
    asked, body = _delayed(rng)
    ops.lock_section(_rw(rng, config), 0.5, body, rng.uniform(0.2, 1.0), False, asked)


def forced_writer(ops: KindOperations, rng: random.Random, config: Config) -> None:
    """A writer with a lock-delay whose hold an operator force-releases (this
    process does it, as the operator would): the delay runs from then."""
    asked, _ = _delayed(rng)
    ops.forced_section(_rw(rng, config), 0.5, asked, holder=rng.random() < 0.5)


def reader(ops: KindOperations, rng: random.Random, config: Config) -> None:
    ops.manager_section(_rw(rng, config), _ttl(rng), _read(rng), Asked(shared=True))


def queued_reader(ops: KindOperations, rng: random.Random, config: Config) -> None:
    timeout = rng.uniform(0.2, 1.0)
    ops.lock_section(_rw(rng, config), _ttl(rng), _read(rng), timeout, False, Asked(shared=True))


def reader_pair(ops: KindOperations, rng: random.Random, config: Config) -> None:
    """Two readers of one process on one resource, the second taken while the first
    holds. Readers of six processes choosing at random may never meet in a short run
    (invariant 7's coverage: CI, 2026-12-06, 56 reader sections on PostgreSQL and
    none beside another); this pair meets unless a writer queued in between."""
    ops.reader_pair_section(_rw(rng, config), _read(rng))


def mode_change(ops: KindOperations, rng: random.Random, config: Config) -> None:
    ops.mode_change_section(_rw(rng, config), rng.choice((1.0, 2.0)), rng.uniform(0.2, 1.0))


def reentrant(ops: KindOperations, rng: random.Random, config: Config) -> None:
    asked = Asked(shared=rng.random() < 0.4)
    ops.reentrant_section(_rw(rng, config), rng.choice((1.0, 2.0)), rng.randint(2, 3), asked)


def reentrant_nested(ops: KindOperations, rng: random.Random, config: Config) -> None:
    asked = Asked(shared=rng.random() < 0.4)
    timeout = rng.choice((None, rng.uniform(0.2, 1.0)))
    ops.reentrant_lock(_rw(rng, config), rng.choice((1.0, 2.0)), rng.randint(2, 3), asked, timeout)


def permit(ops: KindOperations, rng: random.Random, config: Config) -> None:
    resource, limit = _semaphore(rng, config)
    ops.manager_section(resource, _ttl(rng), _read(rng), Asked(limit=limit))


def queued_permit(ops: KindOperations, rng: random.Random, config: Config) -> None:
    resource, limit = _semaphore(rng, config)
    timeout = rng.uniform(0.2, 1.0)
    ops.lock_section(resource, _ttl(rng), _read(rng), timeout, False, Asked(limit=limit))


def _items(rng: random.Random, config: Config) -> list[tuple[str, bool]]:
    """Two or three read-write resources in any order (sets overlap in
    opposite orders), some of them shared."""
    names = rng.sample(config["resources"], rng.randint(2, 3))
    return [(name, rng.random() < 0.3) for name in names]


def several(ops: KindOperations, rng: random.Random, config: Config) -> None:
    ops.several_section(_items(rng, config), _ttl(rng), _write(rng), None)


def several_waiting(ops: KindOperations, rng: random.Random, config: Config) -> None:
    ops.several_section(_items(rng, config), _ttl(rng), _write(rng), rng.uniform(0.2, 1.0))


def leader(ops: KindOperations, rng: random.Random, config: Config) -> None:
    ops.leader_term(rng.choice(config["leaders"]), 1.0, rng.uniform(0.05, 0.5))


def stranger(ops: KindOperations, rng: random.Random, config: Config) -> None:
    resource = rng.choice([*config["resources"], *config["semaphores"], *config["leaders"]])
    if rng.random() < 0.5:
        ops.release(resource, f"{ops.name}.stranger")
    else:
        ops.renew(resource, f"{ops.name}.stranger", _ttl(rng))


def operator(ops: KindOperations, rng: random.Random, config: Config) -> None:
    """Force-release a resource, or one of its holders (found by ``holders()``)."""
    resource = rng.choice([*config["resources"], *config["semaphores"]])
    holds = ops.holders(resource, f"{ops.name}.operator") if rng.random() < 0.5 else None
    ops.force_release(resource, rng.choice(holds)["owner"] if holds else None)


def purge(ops: KindOperations, rng: random.Random, config: Config) -> None:
    ops.purge(command=rng.random() < 0.1)


def throttled(ops: KindOperations, rng: random.Random, config: Config) -> None:
    """A burst of one to four uses of a key: some meet a full window."""
    key = rng.choice(sorted(config["throttles"]))
    for _ in range(rng.randint(1, 4)):
        use(ops, key, str(config["throttles"][key]))


def once(ops: KindOperations, rng: random.Random, config: Config) -> None:
    resource = rng.choice(sorted(config["once_per"]))
    window(ops, resource, float(config["once_per"][resource]), _write(rng), ONCE_PER, 0)


def min_hold(ops: KindOperations, rng: random.Random, config: Config) -> None:
    """``lock(min_hold=...)``, with a ttl shorter than ``min_hold`` now and then
    (the exit then keeps the lock past its ttl)."""
    resource = rng.choice(sorted(config["min_hold"]))
    every = float(config["min_hold"][resource])
    window(ops, resource, every, _write(rng), MIN_HOLD, rng.choice((every / 2, every * 2)))


def prioritized(ops: KindOperations, rng: random.Random, config: Config) -> None:
    """A writer that waits on the priorities' resource with one of a few
    priorities and holds it a while; one in five holds it over half a second,
    so that others queue behind it with theirs (invariant 17)."""
    timeout, priority = rng.uniform(1.0, 3.0), rng.choice(PRIORITIES)
    body = rng.uniform(0.5, 0.8) if rng.random() < 0.2 else rng.uniform(0.03, 0.2)
    ops.lock_section(config["priorities"], 1.0, body, timeout, False, priority=priority)


def until_commit(ops: KindOperations, rng: random.Random, config: Config) -> None:
    """A writer whose hold is bound to its transaction, some of which roll
    back (SQLite refuses it: a plain waiting writer there)."""
    if connections["default"].vendor == "sqlite":
        queued_writer(ops, rng, config)
        return
    rollback = rng.random() < 0.3
    commit_section(ops, _rw(rng, config), 1.0, _write(rng), rng.uniform(0.2, 1.0), rollback)


def crossed(ops: KindOperations, rng: random.Random, config: Config) -> None:
    """Two resources of their own taken in either order: two processes that
    cross make the deadlock check refuse one."""
    first, second = rng.sample(config["crossed"], 2)
    crossed_sections(ops, first, second, 2.0, rng.uniform(0.2, 0.5), 1.5)


def instant(ops: KindOperations, rng: random.Random, config: Config) -> None:
    ops.manager_section(_rw(rng, config), _ttl(rng), 0, EXCLUSIVE)


MIX: list[tuple[float, Call]] = [
    (22, writer),
    (10, queued_writer),
    (4, trying_writer),
    (1, renewed_writer),
    (2, delayed_writer),
    (1, delayed_lock),
    (1, forced_writer),
    (5, reader),
    (7, queued_reader),
    (2, reader_pair),
    (2, mode_change),
    (3, reentrant),
    (2, reentrant_nested),
    (4, permit),
    (4, queued_permit),
    (3, several),
    (3, several_waiting),
    (1.5, leader),
    (8.5, stranger),
    (3, operator),
    (4, purge),
    (13, instant),
    (4, throttled),
    (3, once),
    (1, min_hold),
    (4, prioritized),
    (1, until_commit),
    (1, crossed),
    (6, guarded_writer),
]


def mix(operations: KindOperations, config: Config) -> None:
    """Random calls until a stop file exists."""
    rng = operations.rng
    stops = [Path(path) for path in config["stop_files"]]
    weights = [weight for weight, _ in MIX]
    calls = [call for _, call in MIX]
    reader_pair(operations, rng, config)  # first: every run has readers that met
    while not any(stop.exists() for stop in stops):
        rng.choices(calls, weights)[0](operations, rng, config)
