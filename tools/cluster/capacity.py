"""How many lock operations per second one primary serves through PgBouncer,
with client processes spread over the app hosts, and the CPU it takes.

    python -m tools.cluster.capacity [--clients 8,32,64] [--seconds 10] [--chart docs/capacity.png]
                                     [--json docs/benchmark.json]

Each client loops acquire + release: on its own resource ("own"), or on one of
16 resources all clients share ("shared", where most acquires are refused).
Prints a table: operations/s (calls answered), acquisitions/s, and the CPU the
leader's PostgreSQL, the replicas and PgBouncer used, in cores of this machine.
``--json`` puts the rows into the benchmark JSON under "capacity" (the last
part of ``scripts/benchmark.sh``), keeping the rest of the file.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from benchmarks import document
from tools.cluster import processes
from tools.cluster.apps import REPOSITORY, app_env, migrate
from tools.cluster.cluster import Cluster
from tools.cluster.processes import say

TICKS = os.sysconf("SC_CLK_TCK")
SHARED_RESOURCES = 16
APP_HOSTS = 4  # network namespaces, each reaching PgBouncer through its own link


@dataclass
class Row:
    clients: int
    resources: str  # "own" or "shared"
    operations: float  # calls answered per second (acquire and release)
    acquisitions: float  # granted acquisitions per second
    leader_cpu: float  # cores
    replicas_cpu: float
    pgbouncer_cpu: float
    machine_busy: float  # share of all cores busy


def worker(argv: list[str]) -> None:
    """One client: wait for the go file, loop until the stop time, print counts."""
    resource, go, seconds = argv[0], Path(argv[1]), float(argv[2])
    import django

    django.setup()
    from django.db import connection

    from django_dlock.models import DistributedLock

    connection.ensure_connection()
    owner = f"capacity-{os.getpid()}"
    resources = resource.split(",")
    Path(f"{go}.ready.{os.getpid()}").touch()
    while not go.exists():
        time.sleep(0.01)
    end = float(go.read_text()) + seconds
    operations = acquisitions = index = 0
    while time.time() < end:
        name = resources[index % len(resources)]
        index += 1
        lock = DistributedLock.objects.acquire(name, owner=owner, ttl=30)
        operations += 1
        if lock is not None:
            acquisitions += 1
            DistributedLock.objects.release(name, owner=owner)
            operations += 1
    sys.stdout.write(json.dumps({"operations": operations, "acquisitions": acquisitions}))


def measure(cluster: Cluster, clients: int, shared: bool, seconds: float, work: Path) -> Row:
    go = work / f"go-{clients}-{shared}"
    started = []
    for index in range(clients):
        host = cluster.hosts[index % len(cluster.hosts)]
        if shared:
            resource = ",".join(f"cap:shared:{(index + n) % SHARED_RESOURCES}" for n in range(16))
        else:
            resource = f"cap:own:{index}"
        command = [sys.executable, "-m", "tools.cluster.capacity", "worker", resource, str(go)]
        started.append(
            subprocess.Popen(  # the harness's own command
                host.command([*command, str(seconds)]),
                env=app_env(cluster.pgbouncer_url(host)),
                cwd=REPOSITORY,
                stdout=subprocess.PIPE,
                text=True,
            )
        )
    if not processes.wait_for(lambda: len(list(work.glob(f"{go.name}.ready.*"))) == clients, 300):
        raise RuntimeError("the clients did not start")
    begin = time.time() + 0.5
    written = go.with_suffix(".tmp")
    written.write_text(str(begin))
    written.replace(go)  # atomically: a client never reads it half-written
    # CPU is read over the clients' window exactly, not their start-up or exit.
    time.sleep(max(0.0, begin - time.time()))
    before = _cpu(cluster)
    time.sleep(max(0.0, begin + seconds - time.time()))
    after = _cpu(cluster)
    elapsed = after["wall"] - before["wall"]
    results = [json.loads(p.communicate(timeout=seconds + 300)[0]) for p in started]

    def cores(key: str) -> float:
        return (after[key] - before[key]) / elapsed

    total = after["machine_total"] - before["machine_total"]
    return Row(
        clients,
        "shared" if shared else "own",
        sum(r["operations"] for r in results) / seconds,
        sum(r["acquisitions"] for r in results) / seconds,
        cores("leader"),
        cores("replicas"),
        cores("pgbouncer"),
        (after["machine_busy"] - before["machine_busy"]) / total if total else 0.0,
    )


def _cpu(cluster: Cluster) -> dict[str, float]:
    """CPU seconds so far of the leader's PostgreSQL processes, the replicas' and
    PgBouncer's; busy and total jiffies of the machine."""
    leader = cluster.leader()
    postmasters = {n.name: cluster.postmaster_pid(n) for n in cluster.nodes}
    by_parent: dict[int, float] = {}
    own: dict[int, float] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        pid, parent = int(stat.parent.name), int(fields[1])
        seconds = (int(fields[11]) + int(fields[12])) / TICKS
        own[pid] = seconds
        by_parent[parent] = by_parent.get(parent, 0.0) + seconds

    def tree(pid: int | None) -> float:
        return 0.0 if pid is None else own.get(pid, 0.0) + by_parent.get(pid, 0.0)

    jiffies = [int(v) for v in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    idle = jiffies[3] + jiffies[4]
    return {
        "wall": time.monotonic(),
        "leader": tree(postmasters[leader.name]) if leader else 0.0,
        "replicas": sum(tree(p) for n, p in postmasters.items() if not leader or n != leader.name),
        "pgbouncer": own.get(cluster.pids["pgbouncer"], 0.0),
        "machine_busy": float(sum(jiffies) - idle),
        "machine_total": float(sum(jiffies)),
    }


def save(rows: list[Row], seconds: float, path: Path) -> None:
    """Put ``rows`` into the benchmark JSON at ``path`` under "capacity", with
    the machine's load; the other parts of the file are kept."""
    capacity = {
        "app_hosts": APP_HOSTS,
        "seconds": seconds,
        "cores": os.cpu_count(),
        "load_average": os.getloadavg(),
        "rows": [asdict(row) for row in rows],
    }
    document.put(path, "capacity", capacity)


def table(rows: list[Row]) -> str:
    lines = [
        "| clients | resources | lock ops/s | acquisitions/s | leader PostgreSQL CPU "
        "| replicas CPU | PgBouncer CPU | machine busy |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    lines += [
        f"| {r.clients} | {r.resources} | {r.operations:,.0f} | {r.acquisitions:,.0f} "
        f"| {r.leader_cpu:.2f} cores | {r.replicas_cpu:.2f} | {r.pgbouncer_cpu:.2f} "
        f"| {r.machine_busy:.0%} |"
        for r in rows
    ]
    return "\n".join(lines)


def chart(rows: list[Row], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, ops = plt.subplots(figsize=(7, 4))
    cpu = ops.twinx()
    for kind, style in (("own", "o-"), ("shared", "s--")):
        picked = [r for r in rows if r.resources == kind]
        clients = [r.clients for r in picked]
        ops.plot(clients, [r.operations for r in picked], style, label=f"lock ops/s, {kind}")
        cpu.plot(
            clients, [r.leader_cpu for r in picked], style, alpha=0.4, label=f"leader CPU, {kind}"
        )
    ops.set_xlabel("client processes (over 4 app hosts, through PgBouncer)")
    ops.set_ylabel("lock operations per second")
    cpu.set_ylabel("leader PostgreSQL CPU (cores)")
    ops.set_ylim(bottom=0)
    cpu.set_ylim(bottom=0)
    ops.set_xticks(sorted({r.clients for r in rows}))
    handles = ops.get_legend_handles_labels()[0] + cpu.get_legend_handles_labels()[0]
    labels = ops.get_legend_handles_labels()[1] + cpu.get_legend_handles_labels()[1]
    ops.legend(handles, labels, loc="lower right", fontsize=8)
    ops.set_title("One Patroni primary behind PgBouncer (transaction pooling)")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)


def main(argv: list[str]) -> int:
    if argv[:1] == ["worker"]:
        worker(argv[1:])
        return 0
    parser = argparse.ArgumentParser(prog="python -m tools.cluster.capacity")
    parser.add_argument("--clients", default="8,32,64")
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--chart", type=Path, help="write a PNG chart there (needs matplotlib)")
    parser.add_argument("--json", type=Path, help="the benchmark JSON to add the rows to")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="dlock-capacity.") as work:
        cluster = Cluster.up(app_hosts=APP_HOSTS)
        try:
            migrate(cluster)
            for shared in (False, True):
                for clients in map(int, args.clients.split(",")):
                    rows.append(measure(cluster, clients, shared, args.seconds, Path(work)))
                    say(table(rows[-1:]).splitlines()[-1])
        finally:
            cluster.down()
    say(table(rows))
    if args.json:
        save(rows, args.seconds, args.json)
        say(f'JSON: {args.json} ("capacity")')
    if args.chart:
        chart(rows, args.chart)
        say(f"chart: {args.chart}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
