"""Failover under contention: faults of the leader while app processes in the
app hosts take and release locks, then the history checked.

    python -m tests.cluster.failover [--runs 10] [--faults crash,...] [--async]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.cluster import processes
from tests.cluster.apps import Load, migrate, probe
from tests.cluster.checker import Call, Violation, acquired, check, read_history
from tests.cluster.cluster import Cluster
from tests.cluster.configs import Node
from tests.cluster.processes import say

HEAL_TIMEOUT = 180  # seconds for the old leader to rejoin as a streaming replica


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
    sentinel_kept: bool  # a lock granted just before the fault is still held after it
    unavailable: float = 0.0  # the longest time no lock was granted, around the fault


@dataclass
class Outcome:
    synchronous: bool
    failovers: list[Failover] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    calls: int = 0
    errors: int = 0  # calls that raised (expected during a failover)
    lost_tokens: list[str] = field(default_factory=list)  # a table token below one granted

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
    try:
        load.wait_running()
        for index in range(runs):
            for fault in faults:
                outcome.failovers.append(_one_failover(cluster, fault, f"{index}"))
    finally:
        histories = load.stop()
    history = read_history(histories)
    outcome.calls = len(history)
    outcome.errors = sum("exception" in call["outcome"] for call in history)
    outcome.violations = check(history)
    outcome.lost_tokens = _lost_tokens(cluster, history, load.resources)
    _measure_unavailability(outcome.failovers, history)
    return outcome


def _one_failover(cluster: Cluster, fault: str, run: str) -> Failover:
    if not processes.wait_for(cluster.healthy, HEAL_TIMEOUT, interval=0.2):
        raise RuntimeError(f"the cluster is not healthy before {fault} {run}")
    leader = cluster.leader()
    assert leader is not None
    sentinel = f"sentinel:{fault}:{run}:{time.time_ns()}"
    granted = probe(cluster, "acquire", sentinel, "sentinel", "600")
    began = time.monotonic()
    heal = FAULTS[fault](cluster, leader)

    def recovered() -> bool:
        now = cluster.leader()
        moved = now is not None and (fault not in LEADER_CHANGES or now != leader)
        return moved and time.monotonic() > began + 1 and cluster.writable()

    if not processes.wait_for(recovered, HEAL_TIMEOUT, interval=0.1):
        raise RuntimeError(f"no writable leader after {fault} {run}")
    new_leader = cluster.leader()
    heal()
    if not processes.wait_for(cluster.healthy, HEAL_TIMEOUT, interval=0.2):
        raise RuntimeError(f"{leader.name} did not rejoin after {fault} {run}")
    healed = time.monotonic()
    after = probe(cluster, "read", sentinel).get(sentinel)
    kept = (
        granted is not None
        and after is not None
        and after["held"]
        and after["owner"] == "sentinel"
        and after["fencing_token"] == granted["fencing_token"]
    )
    say(
        f"failover: {fault} of {leader.name} -> {new_leader.name if new_leader else '?'}, "
        f"healed in {healed - began:.1f} s, sentinel {'kept' if kept else 'LOST'}"
    )
    return Failover(fault, leader.name, new_leader.name if new_leader else "?", began, healed, kept)


def _measure_unavailability(failovers: list[Failover], history: list[Call]) -> None:
    """The longest gap between two granted acquisitions that ends after the fault
    and starts before the cluster was healthy again."""
    granted = sorted(call["end"] for call in history if acquired(call))
    for failover in failovers:
        around = [t for t in granted if failover.began - 5 <= t <= failover.healed + 5]
        gaps = [
            later - earlier
            for earlier, later in zip(around, around[1:], strict=False)
            if later > failover.began and earlier < failover.healed
        ]
        failover.unavailable = max(gaps, default=failover.healed - failover.began)


def _lost_tokens(cluster: Cluster, history: list[Call], resources: list[str]) -> list[str]:
    """A resource whose row has a smaller fencing token than one granted: a
    committed acquisition lost."""
    rows = probe(cluster, "read", *resources)
    lost = []
    for resource in resources:
        granted = [
            c["outcome"]["fencing_token"]
            for c in history
            if acquired(c) and c["args"]["resource"] == resource
        ]
        table = (rows.get(resource) or {}).get("fencing_token", 0)
        if granted and table < max(granted):
            lost.append(f"{resource}: table token {table} < granted {max(granted)}")
    return lost


def format_outcome(outcome: Outcome) -> str:
    mode = "synchronous_mode on" if outcome.synchronous else "synchronous_mode off"
    lines = [
        f"## {mode}: {len(outcome.failovers)} failovers, {outcome.calls} calls, "
        f"{outcome.errors} raised",
        "| fault | runs | unavailable p50 | max | sentinel lost |",
        "| --- | --- | --- | --- | --- |",
    ]
    lines += [f"| {' | '.join(map(str, row))} |" for row in outcome.rows()]
    lines.append(f"violations: {len(outcome.violations)}")
    kinds: dict[str, int] = {}
    for violation in outcome.violations:
        kinds[violation.kind] = kinds.get(violation.kind, 0) + 1
    lines += [f"  {kind}: {count}" for kind, count in sorted(kinds.items())]
    lines += [f"  e.g. {v.kind} on {v.resource}: {v.detail}" for v in outcome.violations[:5]]
    lines += [f"  lost: {line}" for line in outcome.lost_tokens]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.cluster.failover")
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
    failed = any(o.violations or o.lost_tokens for o in sync) or any(
        not f.sentinel_kept for o in sync for f in o.failovers
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
