"""Failover under contention: faults of the leader while app processes in the
app hosts take and release holds of every kind (writers and readers of a few
resources, semaphore permits, two locks at once), then the history checked by
the torture run's checker (and ``refusals``). The harness adds to the load's
history sentinel holds taken before each fault (one of each kind), the fault,
and a snapshot of the lock tables once the cluster is healthy again, so that
invariant 6 (nothing lost) checks the sentinels and every table token after
each failover.

    python -m tools.cluster.failover [--runs 10] [--faults crash,...] [--async]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tools.cluster import processes
from tools.cluster.apps import Load, migrate, probe
from tools.cluster.cluster import Cluster
from tools.cluster.configs import Node
from tools.cluster.processes import say
from tools.cluster.refusals import false_refusals
from tools.torture.check_holds import reader_overlaps
from tools.torture.checker import Violation, check
from tools.torture.database import Postgres
from tools.torture.history import Event, Recorder, now
from tools.torture.history import load as load_events
from tools.torture.sections import read
from tools.torture.violations import INVARIANTS

LOAD_CALLS = ("acquire", "release", "acquire_all", "release_all")
HEAL_TIMEOUT = 180  # seconds for the old leader to rejoin as a streaming replica
RUNNER = "runner"  # the harness's own history: sentinels, faults, snapshots


def kill_postgres(cluster: Cluster, leader: Node) -> Callable[[], None]:
    """kill -9 of the leader's postmaster; its Patroni stays and restarts it."""
    pid = cluster.postmaster_pid(leader)
    if pid is not None:
        os.kill(pid, signal.SIGKILL)
    return lambda: None


def crash(cluster: Cluster, leader: Node) -> Callable[[], None]:
    """kill -9 of the leader's Patroni and postmaster, as a host that dies."""
    pid = cluster.postmaster_pid(leader)
    os.kill(cluster.pids[leader.name], signal.SIGKILL)
    if pid is not None:
        os.kill(pid, signal.SIGKILL)
    return lambda: _restart(cluster, leader)


def stop_patroni(cluster: Cluster, leader: Node) -> Callable[[], None]:
    """SIGTERM to the leader's Patroni: it stops PostgreSQL and hands over."""
    os.kill(cluster.pids[leader.name], signal.SIGTERM)
    return lambda: _restart(cluster, leader)


def partition(cluster: Cluster, leader: Node) -> Callable[[], None]:
    """Cut the leader off etcd (its proxy drops and blackholes the link)."""
    proxy = cluster.pids[f"{leader.name}-etcd-proxy"]
    os.kill(proxy, signal.SIGUSR1)
    return lambda: os.kill(proxy, signal.SIGUSR2)


FAULTS: dict[str, Callable[[Cluster, Node], Callable[[], None]]] = {
    "kill-postgres": kill_postgres,
    "crash": crash,
    "stop-patroni": stop_patroni,
    "partition": partition,
}
# Faults after which another node must lead (a killed postmaster is restarted in place).
LEADER_CHANGES = {"crash", "stop-patroni", "partition"}


def _restart(cluster: Cluster, node: Node) -> None:
    processes.wait_for(lambda: not processes.alive(cluster.pids[node.name]), 60)
    cluster.stop_postgres_if_orphaned(node)
    cluster.start_node(node)


@dataclass
class Failover:
    fault: str
    old_leader: str
    new_leader: str
    began: float  # monotonic time of the fault
    healed: float  # the cluster healthy again
    sentinel: str  # the prefix of the holds granted just before the fault (a sentinel of each kind)
    sentinel_kept: bool = False  # all granted, and no violation of invariant 6 on them
    unavailable: float = 0.0  # the longest time no lock was granted, around the fault


@dataclass
class Outcome:
    synchronous: bool
    failovers: list[Failover] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    calls: int = 0
    errors: int = 0  # calls that raised (expected during a failover)
    kinds: dict[str, int] = field(default_factory=dict)  # critical sections by kind
    readers: tuple[int, int] = (0, 0)  # reader sections, pairs of them that overlapped
    in_sets: int = 0  # sections that were parts of all-or-nothing calls

    def rows(self) -> list[tuple[str, int, str, str, int]]:
        """(fault, runs, unavailability p50, max, violations) per fault."""
        rows = []
        for fault in dict.fromkeys(f.fault for f in self.failovers):
            runs = [f for f in self.failovers if f.fault == fault]
            gaps = [f.unavailable for f in runs]
            lost = sum(not f.sentinel_kept for f in runs)
            rows.append(
                (
                    fault,
                    len(runs),
                    f"{statistics.median(gaps):.1f} s",
                    f"{max(gaps):.1f} s",
                    lost,
                )
            )
        return rows


def run_failovers(
    cluster: Cluster, faults: list[str], runs: int, directory: Path, *, synchronous: bool = True
) -> Outcome:
    if cluster.synchronous != synchronous:
        cluster.set_synchronous(synchronous)
    outcome = Outcome(synchronous=synchronous)
    load = Load(cluster, directory)
    load.start()
    runner = Recorder(directory / f"{RUNNER}.history", RUNNER)
    try:
        load.wait_running()
        for index in range(runs):
            for fault in faults:
                outcome.failovers.append(_one_failover(cluster, runner, fault, f"{index}"))
    finally:
        histories = load.stop()
        runner.close()
    events = load_events([*histories, directory / f"{RUNNER}.history"])
    calls = [e for e in events if e["p"] != RUNNER and e["op"] in LOAD_CALLS]
    outcome.calls = len(calls)
    outcome.errors = sum("error" in call for call in calls)
    outcome.violations = check(events) + false_refusals(events)
    entered = [e for e in events if e["op"] == "cs_enter"]
    outcome.kinds = dict(Counter(e.get("kind", "exclusive") for e in entered))
    outcome.readers = reader_overlaps(read(events))
    outcome.in_sets = sum(1 for e in entered if e.get("set"))
    for failover in outcome.failovers:
        failover.sentinel_kept = failover.sentinel_kept and not any(
            v.invariant == 6
            and str(v.events[0].get("resource", "")).startswith(f"{failover.sentinel}:")
            for v in outcome.violations
        )
    _measure_unavailability(outcome.failovers, events)
    return outcome


def _one_failover(cluster: Cluster, runner: Recorder, fault: str, run: str) -> Failover:
    if not processes.wait_for(cluster.healthy, HEAL_TIMEOUT, interval=0.2):
        raise RuntimeError(f"the cluster is not healthy before {fault} {run}")
    leader = cluster.leader()
    assert leader is not None
    sentinel = f"sentinel:{fault}:{run}:{time.time_ns()}"
    granted = True
    for event in probe(cluster, "sentinels", sentinel, "sentinel", "600"):
        runner.write(event.pop("op"), **event)
        granted = granted and bool(event.get("lock") or event.get("locks"))
    began = now()
    heal = FAULTS[fault](cluster, leader)

    def recovered() -> bool:
        current = cluster.leader()
        moved = current is not None and (fault not in LEADER_CHANGES or current != leader)
        return moved and time.monotonic() > began + 1 and cluster.writable()

    if not processes.wait_for(recovered, HEAL_TIMEOUT, interval=0.1):
        raise RuntimeError(f"no writable leader after {fault} {run}")
    new_leader = cluster.leader()
    heal()
    if not processes.wait_for(cluster.healthy, HEAL_TIMEOUT, interval=0.2):
        raise RuntimeError(f"{leader.name} did not rejoin after {fault} {run}")
    healed = now()
    new_name = new_leader.name if new_leader else "?"
    runner.write("fault", kind=f"{fault} of {leader.name} -> {new_name}", t0=began, t1=healed)
    _snapshot(cluster, runner)
    say(f"failover: {fault} of {leader.name} -> {new_name}, healed in {healed - began:.1f} s")
    return Failover(fault, leader.name, new_name, began, healed, sentinel, granted)


def _snapshot(cluster: Cluster, runner: Recorder) -> None:
    """The whole lock table and the database's clock at one moment."""
    t0 = now()
    db_now, rows, holds = Postgres(cluster.primary_url(), None, None).snapshot(
        cluster.pgbouncer_url()
    )
    runner.write("snapshot", t0=t0, t1=now(), now=db_now, rows=rows, holds=holds)


def _measure_unavailability(failovers: list[Failover], events: list[Event]) -> None:
    """The longest gap between two of the load's granted acquisitions that ends
    after the fault and starts before the cluster was healthy again."""
    granted = sorted(
        e["t1"] for e in events if e["op"] == "acquire" and e.get("lock") and e["p"] != RUNNER
    )
    for failover in failovers:
        around = [t for t in granted if failover.began - 5 <= t <= failover.healed + 5]
        gaps = [
            later - earlier
            for earlier, later in zip(around, around[1:], strict=False)
            if later > failover.began and earlier < failover.healed
        ]
        failover.unavailable = max(gaps, default=failover.healed - failover.began)


def format_outcome(outcome: Outcome) -> str:
    mode = "synchronous_mode on" if outcome.synchronous else "synchronous_mode off"
    lines = [
        f"## {mode}: {len(outcome.failovers)} failovers, {outcome.calls} calls, "
        f"{outcome.errors} raised",
        "critical sections: "
        + ", ".join(f"{count} {kind}" for kind, count in sorted(outcome.kinds.items()))
        + f" ({outcome.in_sets} of them parts of all-or-nothing calls); "
        + f"{outcome.readers[1]} pairs of {outcome.readers[0]} readers held together",
        "",
        "| fault | runs | unavailable p50 | max | sentinels lost |",
        "| --- | --- | --- | --- | --- |",
    ]
    lines += [f"| {' | '.join(map(str, row))} |" for row in outcome.rows()]
    lines.append(f"violations: {len(outcome.violations)} (the torture checker's invariants)")
    for number, name in INVARIANTS.items():
        count = sum(v.invariant == number for v in outcome.violations)
        lines.append(f"  {number} {name}: {count}")
    lines += [f"  e.g. [{v.invariant}] {v.message}" for v in outcome.violations[:5]]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.cluster.failover")
    parser.add_argument("--runs", type=int, default=10, help="failovers per fault (10)")
    parser.add_argument("--faults", default=",".join(FAULTS))
    parser.add_argument("--modes", default="sync,async", help="sync, async or both (default)")
    args = parser.parse_args(argv)
    faults = args.faults.split(",")
    with tempfile.TemporaryDirectory(prefix="dlock-failover.") as work:
        cluster = Cluster.up()
        try:
            migrate(cluster)
            outcomes = [
                run_failovers(
                    cluster, faults, args.runs, Path(work) / mode, synchronous=mode == "sync"
                )
                for mode in args.modes.split(",")
            ]
        finally:
            cluster.down()
    for outcome in outcomes:
        say(format_outcome(outcome))
    sync = [o for o in outcomes if o.synchronous]
    failed = any(o.violations for o in sync) or any(
        not f.sentinel_kept for o in sync for f in o.failovers
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
