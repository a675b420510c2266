"""One client, no contention: each lock kind's acquire + release cycle beside
the exclusive one and the database's raw floor, and what each operation sends.

Every cycle uses resources of its own (``{prefix}:{n % 10}``, and ``a``/``b``/``c``
variants for several at once). A cycle returns the seconds its acquisition
took, which ``single.measure_round`` keeps beside the whole cycle's.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from benchmarks import kinds_setup
from benchmarks.contenders import Cycle
from benchmarks.mariadb import django_floor
from benchmarks.proxy import DelayProxy
from benchmarks.single import measure_round

LIMIT = 4  # the semaphore's permits in the permit cycle


def _locks(using: str) -> Any:
    from django_dlock.models import DistributedLock

    return DistributedLock.objects.db_manager(using)


def _taken(hold: object, what: str) -> None:
    if hold is None:
        raise RuntimeError(f"django-dlock did not take a free lock ({what})")


def single(using: str, **kind: Any) -> Callable[[str], Cycle]:
    """``acquire(..., **kind)`` of a free resource, then ``release``."""

    def make(prefix: str) -> Cycle:
        locks = _locks(using)

        def cycle(n: int) -> float:
            resource = f"{prefix}:{n % 10}"
            started = time.perf_counter()
            hold = locks.acquire(resource, owner=prefix, ttl=30, **kind)
            took = time.perf_counter() - started
            _taken(hold, resource)
            locks.release(resource, owner=prefix)
            return took

        return cycle

    return make


def reentry(using: str) -> Callable[[str], Cycle]:
    """The holder of a reentrant lock takes it again (one hold more) and gives
    that hold back (``DECREMENTED``)."""

    def make(prefix: str) -> Cycle:
        from django_dlock.models import ReleaseResult

        locks = _locks(using)
        resource = f"{prefix}:held"
        _taken(locks.acquire(resource, owner=prefix, ttl=300, reentrant=True), resource)

        def cycle(n: int) -> float:
            started = time.perf_counter()
            hold = locks.acquire(resource, owner=prefix, ttl=300, reentrant=True)
            took = time.perf_counter() - started
            _taken(hold, resource)
            if locks.release(resource, owner=prefix) is not ReleaseResult.DECREMENTED:
                raise RuntimeError("a re-entry's release did not leave the first hold")
            return took

        return cycle

    return make


def all_of_three(using: str) -> Callable[[str], Cycle]:
    """``acquire_all`` of three free resources, then ``release_all``."""

    def make(prefix: str) -> Cycle:
        locks = _locks(using)

        def cycle(n: int) -> float:
            resources = [f"{prefix}:{part}{n % 10}" for part in "abc"]
            started = time.perf_counter()
            holds = locks.acquire_all(resources, owner=prefix, ttl=30)
            took = time.perf_counter() - started
            _taken(holds, ", ".join(resources))
            locks.release_all(resources, owner=prefix)
            return took

        return cycle

    return make


def three_singles(using: str) -> Callable[[str], Cycle]:
    """Three ``acquire`` calls, then three ``release`` calls."""

    def make(prefix: str) -> Cycle:
        locks = _locks(using)

        def cycle(n: int) -> float:
            resources = [f"{prefix}:{part}{n % 10}" for part in "abc"]
            started = time.perf_counter()
            for resource in resources:
                _taken(locks.acquire(resource, owner=prefix, ttl=30), resource)
            took = time.perf_counter() - started
            for resource in resources:
                locks.release(resource, owner=prefix)
            return took

        return cycle

    return make


def contenders(using: str) -> dict[str, Callable[[str], Cycle]]:
    """Each cycle of one database, by the name the report and the goals use."""
    floors = {"floor": kinds_setup.floor(using)}
    if using == "mariadb":  # also as benchmarks.mariadb measured it, for comparison
        floors["floor, Django cursor"] = django_floor(using)
    return {
        **floors,
        "exclusive": single(using),
        "shared": single(using, shared=True),
        "permit": single(using, limit=LIMIT),
        "reentrant re-entry": reentry(using),
        "acquire_all of 3": all_of_three(using),
        "3 single acquires": three_singles(using),
    }


def uncontended(
    aliases: list[str], rounds: int, seconds: float, cpu: dict[str, Callable[[], float] | None]
) -> list[dict[str, Any]]:
    """Every cycle of every database in interleaved rounds; the median round's
    figures of each."""
    cycles: dict[tuple[str, str], Cycle] = {}
    for alias in aliases:
        for index, (name, make) in enumerate(contenders(alias).items()):
            cycle = cycles[(alias, name)] = make(f"k{index}")
            for n in range(20):  # connections, prepared statements, rows
                cycle(n)
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {key: [] for key in cycles}
    for number in range(rounds):
        print(f"  kinds: uncontended round {number + 1}/{rounds}", file=sys.stderr)
        for (alias, name), cycle in cycles.items():
            runs[(alias, name)].append(measure_round(cycle, seconds, cpu.get(alias)))
    results = []
    for (alias, name), measured in runs.items():
        latencies = sorted(x for run in measured for x in run["latencies"])
        acquisitions = sorted(x for run in measured for x in run["acquisitions"])
        server = [run["server_cpu_ms"] for run in measured if run["server_cpu_ms"] is not None]
        results.append(
            {
                "database": alias,
                "name": name,
                "cycles_per_s": statistics.median(run["rate"] for run in measured),
                "rounds": [run["rate"] for run in measured],
                "acquire_rounds_ms": [
                    statistics.median(run["acquisitions"]) * 1000 if run["acquisitions"] else None
                    for run in measured
                ],
                "cycle_p50_ms": latencies[len(latencies) // 2] * 1000,
                "acquire_p50_ms": (
                    acquisitions[len(acquisitions) // 2] * 1000 if acquisitions else None
                ),
                "client_cpu_ms": statistics.median(run["client_cpu_ms"] for run in measured),
                "server_cpu_ms": statistics.median(server) if server else None,
            }
        )
    return results


# -- what each operation sends -----------------------------------------------------


def operations(using: str) -> dict[str, Callable[[], object]]:
    """The operations counted, in an order that leaves each one's state as it
    found it (a free resource; ``ops:held`` held once, reentrant)."""
    locks = _locks(using)
    three = ["ops:a", "ops:b", "ops:c"]
    return {
        "exclusive acquire": lambda: locks.acquire("ops:x", owner="o", ttl=30),
        "exclusive release": lambda: locks.release("ops:x", owner="o"),
        "shared acquire": lambda: locks.acquire("ops:s", owner="o", ttl=30, shared=True),
        "shared release": lambda: locks.release("ops:s", owner="o"),
        "permit acquire": lambda: locks.acquire("ops:p", owner="o", ttl=30, limit=LIMIT),
        "permit release": lambda: locks.release("ops:p", owner="o"),
        "reentrant re-entry": lambda: locks.acquire("ops:held", owner="o", ttl=300, reentrant=True),
        "re-entry's release (decrement)": lambda: locks.release("ops:held", owner="o"),
        "acquire_all of 3": lambda: locks.acquire_all(three, owner="o", ttl=30),
        "release_all of 3": lambda: locks.release_all(three, owner="o"),
    }


def count_operations(
    alias: str, proxy: DelayProxy | None, repeats: int
) -> dict[str, dict[str, float | None]]:
    """Per operation, the mean over ``repeats`` (after a warm-up): round trips
    and statements the server ran, counted by the proxy (statements: PostgreSQL
    only), and the statements Django's query log saw (BEGIN and COMMIT
    included). ``proxy``: the one the alias's ``_counted`` twin goes through
    (None for SQLite, which has no round trips)."""
    from benchmarks.counting import seen_by_django

    using = alias + kinds_setup.COUNTED if proxy is not None else alias
    _locks(using).acquire("ops:held", owner="o", ttl=300, reentrant=True)
    steps = operations(using)
    totals = {name: {"round_trips": 0, "statements": 0, "django": 0} for name in steps}
    for repeat in range(repeats + 3):
        for name, step in steps.items():
            before = proxy.counts() if proxy is not None else None
            with seen_by_django(using) as seen:
                step()
            if repeat < 3:  # warm-up: the connection's first PREPAREs
                continue
            if proxy is not None and before is not None:
                counted = proxy.counts() - before
                totals[name]["round_trips"] += counted.round_trips
                totals[name]["statements"] += counted.statements
            totals[name]["django"] += seen["logged"]
    _locks(using).release("ops:held", owner="o")
    figures: dict[str, dict[str, float | None]] = {}
    for name, total in totals.items():
        figures[name] = {
            "round_trips": total["round_trips"] / repeats if proxy is not None else None,
            "server_statements": (
                total["statements"] / repeats if proxy is not None and proxy.postgres else None
            ),
            "django_statements": total["django"] / repeats,
        }
    return figures
