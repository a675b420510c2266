"""The benchmark's terminal tables and its chart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

CHART_PATHS = {"proxy": "via proxy", "sqlite": "SQLite"}
PATHS = {
    "pg": "PostgreSQL, loopback",
    "proxy": "PostgreSQL through the delaying proxy",
    "sqlite": "SQLite (file, WAL)",
    "mariadb": "MariaDB",
}


def _floors(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {row["floor_key"]: row for row in rows if row["floor"]}


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_tables(results: dict[str, Any]) -> None:
    machine = results["machine"]
    print(
        f"\n{machine['date']}: {machine['nproc']} cores ({machine['cpu']}), load "
        f"{' '.join(f'{x:.1f}' for x in machine['load_average'])}, Linux {machine['kernel']}\n"
        f"{machine['postgresql']} (fsync {machine['postgresql_fsync']}), SQLite {machine['sqlite']}, "
        f"{machine['redis_server']}\nPython {machine['python']}, Django {machine['django']}, "
        f"psycopg {machine['psycopg']}, redis-py {machine['redis_py']}"
        + ("  [--quick]" if results.get("quick") else "")
    )
    if "uncontended" in results:
        _uncontended(results["uncontended"], results["delay_ms"])
        _operations(results["operations"])
    if "clients" in results:
        _clients(results["clients"])
    if "contention" in results:
        _contention(results["contention"])
    if "wakeup" in results:
        _wakeup(results["wakeup"])
    if "purge" in results:
        _purge(results["purge"])


def _uncontended(rows: list[dict[str, Any]], delay_ms: float) -> None:
    floors = _floors(rows)
    print(
        f"\nUncontended acquire + release, one client (median of interleaved rounds); "
        f"the proxy adds {delay_ms:g} ms each way"
    )
    header = (
        f"{'contender':<26} {'server':<10} {'cycles/s':>9} {'x floor':>8} {'p50 ms':>7} "
        f"{'p99 ms':>7} {'RT/op':>6} {'stmt/op':>8} {'DB CPU ms':>10} {'x floor':>8} {'client ms':>10}"
    )
    for key, title in PATHS.items():
        group = [row for row in rows if row["floor_key"] == key]
        if not group:
            continue
        floor = floors.get(key)
        print(f"-- {title}\n{header}")
        for row in group:
            ratio = row["cycles_per_s"] / floor["cycles_per_s"] if floor else None
            cpu_ratio = (
                row["server_cpu_ms"] / floor["server_cpu_ms"]
                if floor
                and row["server_cpu_ms"] is not None
                and row["server"] == floor["server"]
                and floor["server_cpu_ms"]
                else None
            )
            print(
                f"{row['name']:<26} {row['server']:<10} {row['cycles_per_s']:>9,.0f} {_fmt(ratio, '>8.2f')} "
                f"{row['p50_ms']:>7.2f} {row['p99_ms']:>7.2f} {_fmt(row.get('round_trips'), '>6.1f')} "
                f"{_fmt(row.get('statements'), '>8.1f')} {_fmt(row['server_cpu_ms'], '>10.3f')} "
                f"{_fmt(cpu_ratio, '>8.2f')} {row['client_cpu_ms']:>10.3f}"
            )


def _operations(operations: dict[str, dict[str, float]]) -> None:
    print("\ndjango-dlock on PostgreSQL, one operation (counted at the proxy and in Django)")
    print(
        f"{'operation':<28} {'round trips':>11} {'statements':>10} {'execute_wrapper':>15} {'query log':>9}"
    )
    for name, figures in operations.items():
        print(
            f"{name:<28} {figures['round_trips']:>11} {figures['statements']:>10} "
            f"{figures['django_wrapper']:>15} {figures['django_logged']:>9}"
        )


def _clients(rows: list[dict[str, Any]]) -> None:
    floors = {row["clients"]: row for row in rows if row["name"] == "raw one-statement floor"}
    print("\nN client processes on their own resources, one PostgreSQL / redis-server (medians)")
    print(
        f"{'clients':>7} {'contender':<26} {'cycles/s':>9} {'x floor':>8} {'server CPU ms':>13} {'x floor':>8} {'client CPU ms':>13}"
    )
    for row in sorted(rows, key=lambda r: r["clients"]):
        floor = floors[row["clients"]]
        cpu_ratio = (
            row["server_cpu_ms"] / floor["server_cpu_ms"] if floor["server_cpu_ms"] else None
        )
        print(
            f"{row['clients']:>7} {row['name']:<26} {row['cycles_per_s']:>9,.0f} "
            f"{row['cycles_per_s'] / floor['cycles_per_s']:>8.2f} {row['server_cpu_ms']:>13.3f} "
            f"{_fmt(cpu_ratio, '>8.2f')} {row['client_cpu_ms']:>13.3f}"
        )


def _contention(rows: list[dict[str, Any]]) -> None:
    print("\n8 processes, one resource, 1 ms hold (medians)")
    print(f"{'contender':<30} {'mode':<13} {'acquisitions/s':>14} {'attempts/s':>10} {'Jain':>5}")
    for row in rows:
        print(
            f"{row['name']:<30} {row['mode']:<13} {row['acquisitions_per_s']:>14,.0f} "
            f"{row['attempts_per_s']:>10,.0f} {row['jain']:>5.2f}"
        )


def _wakeup(rows: list[dict[str, Any]]) -> None:
    print("\nWake-up: from the holder's release to the waiter's acquire returning")
    print(f"{'contender':<30} {'p50 ms':>8} {'max ms':>8} {'samples':>7}")
    for row in rows:
        print(
            f"{row['name']:<30} {row['p50_ms']:>8.1f} {row['max_ms']:>8.1f} {len(row['samples_ms']):>7}"
        )


def _purge(purge: dict[str, Any]) -> None:
    print(f"\nA table of {purge['rows']:,} rows (PostgreSQL)")
    print(
        f"acquire latency, median: empty {purge['median_empty_ms']:.2f} ms, full {purge['median_full_ms']:.2f} ms ({purge['latency_ratio']:.2f}x); p99 full {purge['p99_full_ms']:.2f} ms"
    )
    print(
        f"purge_locks of {purge['rows']:,} expired rows: {purge['purge_s']:.2f} s; worst concurrent acquire "
        f"{purge['worst_acquire_ms']:.1f} ms; peak memory {purge['peak_mb']:.0f} MB"
    )


def chart(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [key for key in ("uncontended", "clients") if key in results]
    if not panels:
        return
    figure, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.8), squeeze=False)
    axes_iter = iter(axes[0])
    if "uncontended" in results:
        axis = next(axes_iter)
        rows = results["uncontended"]
        floors = _floors(rows)
        groups = [
            (key, [r for r in rows if r["floor_key"] == key]) for key in ("pg", "proxy", "sqlite")
        ]
        labels, values, colors = [], [], []
        palette = {"pg": "#4c72b0", "proxy": "#dd8452", "sqlite": "#55a868"}
        for key, group in groups:
            if key not in floors:
                continue
            for row in group:
                labels.append(
                    f"{row['name']}, {row['server'] if key == 'pg' else CHART_PATHS[key]}"
                )
                values.append(row["cycles_per_s"] / floors[key]["cycles_per_s"])
                colors.append(palette[key])
        positions = range(len(labels))
        axis.barh(list(positions), values, color=colors)
        axis.set_yticks(list(positions), labels, fontsize=8)
        axis.invert_yaxis()
        axis.axvline(1.0, color="black", linewidth=0.8)
        axis.set_xscale("log")
        axis.set_xlabel("acquire+release cycles/s, x the raw one-statement floor (log)")
        axis.set_title(f"One client (proxy: +{results['delay_ms']:g} ms each way)", fontsize=10)
    if "clients" in results:
        axis = next(axes_iter)
        rows = results["clients"]
        for name in dict.fromkeys(row["name"] for row in rows):
            points = sorted((r["clients"], r["cycles_per_s"]) for r in rows if r["name"] == name)
            axis.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=name)
        axis.set_xscale("log", base=2)
        axis.set_xlabel("client processes")
        axis.set_ylabel("cycles/s, all clients")
        axis.set_title(
            f"Throughput, {results['machine']['nproc']} cores shared by clients and server",
            fontsize=10,
        )
        axis.legend(fontsize=8)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
