"""The tables of ``benchmarks.floor``, printed from its JSON figures."""

from __future__ import annotations

import statistics
from typing import Any


def clients_row(name: str, runs: list[dict[str, float]]) -> dict[str, Any]:
    """The median of ``benchmarks.clients.throughput``'s runs of one contender."""
    return {
        "name": name,
        "rounds": len(runs),
        "cycles_per_s": round(statistics.median(run["cycles_per_s"] for run in runs), 1),
        "rounds_cycles_per_s": [round(run["cycles_per_s"], 1) for run in runs],
        "client_cpu_ms": round(statistics.median(run["client_cpu_ms"] for run in runs), 4),
        "server_cpu_ms": round(statistics.median(run["server_cpu_ms"] for run in runs), 4),
    }


def busy(machine: dict[str, Any]) -> bool:
    """Whether the machine ran more than it had cores, at the start or the end (1-minute load)."""
    loads = [machine["load_average"], machine.get("load_average_end") or [0.0]]
    return bool(max(load[0] for load in loads) > machine["nproc"])


def _number(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _times(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}x"


def print_rows(title: str, rows: list[dict[str, Any]]) -> None:
    """One contender a line: speed, and each cost per cycle with its multiple of the floor's."""
    print(f"\n{title}")
    print(
        f"  {'contender':<40} {'cycles/s':>9} {'x floor':>7} {'paired [rounds]':>19} {'wall ms':>8} "
        f"{'client CPU ms':>14} {'backend CPU ms':>15} {'server CPU ms':>14} {'exec µs':>13}"
    )
    for row in rows:
        spread = row.get("x_floor_rounds")
        paired = row.get("x_floor_paired")
        rounds = f"{paired:.2f} [{spread[0]:.2f}-{spread[1]:.2f}]" if spread and paired else ""
        costs = [
            ("client_cpu_ms", "client_cpu_x_floor", 14, 3),
            ("backend_cpu_ms", "backend_cpu_x_floor", 15, 3),
            ("server_cpu_ms", "server_cpu_x_floor", 14, 3),
            ("exec_us_per_cycle", "exec_x_floor", 13, 1),
        ]
        cells = [
            f"{_number(row.get(key), digits) + ' ' + _times(row.get(multiple)):>{width}}"
            for key, multiple, width, digits in costs
        ]
        wall = row.get("wall_ms")
        print(
            f"  {row['name']:<40} {row['cycles_per_s']:>9,.0f} {row['x_floor']:>7.2f} "
            f"{rounds:>19} {_number(wall):>8} {' '.join(cells)}"
        )


def print_statements(rows: list[dict[str, Any]]) -> None:
    """Each contender's top statements by execution time (pg_stat_statements)."""
    for row in rows:
        if not row.get("top"):
            continue
        print(
            f"  {row['name']}: {row['statements_per_cycle']} statements, "
            f"{row['exec_us_per_cycle']} µs of execution per cycle; the top ones "
            "(calls per cycle, mean µs per call, buffers and WAL records per call):"
        )
        for statement in row["top"]:
            print(
                f"    {statement['calls_per_cycle']:>5} x {statement['mean_exec_us']:>7.1f} µs "
                f"{statement['buffers_per_call']:>5} buf {statement['wal_records_per_call']:>4} WAL  "
                f"{statement['query'][:110]}"
            )


def print_tables(results: dict[str, Any]) -> None:
    plan, machine = results["plan"], results["machine"]
    print(
        f"\nacquire + release over {plan['names']:,} names in turn, owner given, ttl 30 s; "
        f"{plan['rounds']} interleaved rounds of {plan['cycles']:,} cycles a contender: "
        "cycles/s and wall of the median round, x floor the medians' ratio, paired the median "
        "of each round's ratio to the floor's round [least-most]; costs per cycle over all "
        "rounds, each with its multiple of the floor's"
    )
    print(
        "  backend CPU: the connection's server process (/proc); server CPU: the whole server; "
        "exec: pg_stat_statements (execution, not planning)"
    )
    postgres = results.get("postgresql", {})
    for part, label in (("durable", "durable"), ("fast", "fast commits")):
        if part in results:
            server = postgres.get(part, {})
            print_rows(
                f"PostgreSQL {server.get('server_version', '')}, {label} (fsync "
                f"{server.get('fsync')}, synchronous_commit {server.get('synchronous_commit')}), "
                "one client:",
                results[part],
            )
            print_statements(results[part])
    for count, rows in (results.get("clients") or {}).items():
        print_rows(
            f"PostgreSQL, durable, {count} client processes sharing the names, "
            f"{plan['client_seconds']:g} s x {plan['client_rounds']} rounds (server CPU: "
            "the whole server, per cycle):",
            rows,
        )
    servers = results.get("servers", {})
    for part, label in (("sqlite", "SQLite"), ("mariadb", "MariaDB")):
        if part in results:
            found = ", ".join(f"{key} {value}" for key, value in servers.get(part, {}).items())
            print_rows(f"{label} ({found}), one client, beside its own floor:", results[part])
    if results.get("goals"):
        print("\nissue 45's goals (the manager's acquire + release):")
        for goal in results["goals"]:
            print(
                f"  {'met   ' if goal['met'] else 'MISSED'} {goal['goal']:<58} "
                f"{goal['figure']:>7.3f} (goal {goal['target']})"
            )
    start, end = machine["load_average"], machine.get("load_average_end")
    if busy(machine):
        print(
            "\nBUSY: the load average passed the number of cores: other work shared the CPU and "
            "the disk, and the speeds (the wall time: commits' flushes, the neighbours' bursts) "
            "say more about them than about the contenders; the CPU multiples hold better."
        )
    print(
        f"\nload average at the start {' '.join(f'{x:.2f}' for x in start)}, at the end "
        f"{' '.join(f'{x:.2f}' for x in end) if end else '-'}; {machine['nproc']} cores; "
        f"{results.get('seconds', '-')} s"
    )
