"""``benchmarks.features``'s terminal tables: each figure beside its reference."""

from __future__ import annotations

from typing import Any

from benchmarks.features_cycles import throttle_scenarios
from benchmarks.kinds_report import paired
from benchmarks.kinds_setup import LABELS
from benchmarks.report import _fmt

NEW_NAME = "lock(), a new name each time"
# Each one-client cycle's reference, measured in the same rounds on the same database.
REFERENCES = {
    "lock(lock_delay=5)": "lock()",
    "lock(min_hold=60), a new name each time": NEW_NAME,
    "once_per(every=60), due (a new name)": NEW_NAME,
    "once_per(), not due (window held)": NEW_NAME,
    "lock() around atomic() + UPDATE": "atomic() + UPDATE, no lock",
    "atomic() + lock(until='commit') + UPDATE": "lock() around atomic() + UPDATE",
    "the same, CONN_MAX_AGE=60": "lock() around atomic() + UPDATE",
} | {f"throttle, {scenario}": "floor: one upsert" for scenario in throttle_scenarios()}


def _label(database: str) -> str:
    return LABELS.get(database, database.capitalize())


def reference_ratios(cycles: list[dict[str, Any]]) -> dict[tuple[str, str], tuple[str, float]]:
    """(database, name): (its reference, the median of the rounds' ratios)."""
    rows = {f"{row['database']}|{row['name']}": row for row in cycles}
    found = {}
    for row in cycles:
        reference = REFERENCES.get(row["name"])
        if reference and f"{row['database']}|{reference}" in rows:
            ratio = paired(
                rows, f"{row['database']}|{row['name']}", f"{row['database']}|{reference}"
            )
            found[(row["database"], row["name"])] = (reference, ratio)
    return found


def redis_ratios(cycles: list[dict[str, Any]]) -> dict[tuple[str, str], float]:
    """(database, scenario): django-dlock's throttle x Redis's sliding window, per round."""
    rows = {f"{row['database']}|{row['name']}": row for row in cycles}
    found = {}
    for scenario in throttle_scenarios():
        theirs = f"redis|Redis sliding window, {scenario}"
        for database in dict.fromkeys(row["database"] for row in cycles):
            mine = f"{database}|throttle, {scenario}"
            if mine in rows and theirs in rows:
                found[(database, scenario)] = paired(rows, mine, theirs)
    return found


def print_tables(results: dict[str, Any]) -> None:
    machine = results["machine"]
    load = " ".join(f"{x:.1f}" for x in machine["load_average"])
    end = " ".join(f"{x:.1f}" for x in machine.get("load_average_end", []))
    print(
        f"\nIssue 36's features, {machine['date']} at {results['commit']}: {machine['nproc']} cores; "
        f"load average {load} at the start, {end} at the end; "
        f"{', '.join(results['versions'].values())}" + ("  [--quick]" if results["quick"] else "")
    )
    if results.get("cycles"):
        _cycles(results["cycles"])
    if results.get("throttle_crowd"):
        _crowd(results["throttle_crowd"])
    for alias, figures in results.get("priorities", {}).items():
        print(
            f"\n{_label(alias)}: 8 processes in lock(timeout=60) on one resource, 1 ms holds: "
            f"with priorities x without {figures['ratio']:.2f}"
        )
        for name in ("priority 0", "priorities -3..4"):
            row = figures[name]
            print(
                f"  {name:<18} {row['per_s']:>7,.0f}/s  Jain {row['jain']:.3f}  "
                f"lock() p50 {row['lock_p50_ms']:.1f} ms  turns {row['turns_last_round']}"
            )
    for alias, figures in results.get("late_priority", {}).items():
        print(f"\n{_label(alias)}: a waiter behind 6 of priority 0 (place 1 = the next hand-over)")
        for name, row in figures.items():
            print(
                f"  {name:<12} places {row['places']}  after the release p50 "
                f"{row['after_release_p50_ms']:.1f} ms"
            )
    _spreads(
        "lock-delay 1 s: the waiter got the lock this long after the delay's end",
        results.get("lock_delay", {}),
    )
    for alias, figures in results.get("deadlock_waiting", {}).items():
        print(f"\n{_label(alias)}: a waiter blocked, per second of waiting (medians)")
        for name, row in figures.items():
            server = f"{row['server_cpu_ms_per_s']:.1f}" if row["server_measured"] else "-"
            print(
                f"  {name:<22} client CPU {row['client_cpu_ms_per_s']:.2f} ms/s  "
                f"server CPU {server} ms/s  wake-up {row['wake_ms']:.1f} ms"
            )
    _spreads("deadlock: from its forming", results.get("deadlock_detection", {}))


def _cycles(cycles: list[dict[str, Any]]) -> None:
    ratios = reference_ratios(cycles)
    print(
        "\nOne client (medians of interleaved rounds; a ratio is the median of the rounds' ratios)"
    )
    print(
        f"{'database':<11} {'cycle':<50} {'per s':>8} {'x ref':>6} {'refused':>8} "
        f"{'client CPU ms':>13} {'DB CPU ms':>10}  reference"
    )
    for row in cycles:
        reference, ratio = ratios.get((row["database"], row["name"]), ("", None))
        share = row["refused_share"]
        print(
            f"{_label(row['database']):<11} {row['name']:<50} {row['cycles_per_s']:>8,.0f} "
            f"{_fmt(ratio, '>6.2f')} {_fmt(None if share is None else share * 100, '>7.0f')}"
            f"{'%' if share is not None else ' '} {row['client_cpu_ms']:>13.3f} "
            f"{_fmt(row['server_cpu_ms'], '>10.3f')}  {reference}"
        )
    print("django-dlock's throttle x Redis's sliding window, same scenario:")
    for (database, scenario), ratio in redis_ratios(cycles).items():
        print(f"  {_label(database):<11} {scenario:<46} {ratio:.2f}")


def _crowd(rows: list[dict[str, Any]]) -> None:
    print("\n4 processes on one key as fast as they can (median round; most: the max of any round)")
    print(
        f"{'limiter':<22} {'rate':>8} {'decided/s':>10} {'granted/s':>10} {'most in 1 s':>12} {'CPU ms/use':>10}"
    )
    for row in rows:
        print(
            f"{_label(row['limiter']):<22} {str(row['limit']) + '/s':>8} {row['decided_per_s']:>10,.0f} "
            f"{row['granted_per_s']:>10,.1f} {row['most_in_a_window']:>12} {row['client_cpu_ms']:>10.3f}"
        )


def _spreads(title: str, by_alias: dict[str, dict[str, Any]]) -> None:
    for alias, figures in by_alias.items():
        print(f"\n{_label(alias)}, {title} (ms, p50 / p90 / max)")
        for name, row in figures.items():
            print(f"  {name:<40} {row['p50_ms']:>7.1f} / {row['p90_ms']:.1f} / {row['max_ms']:.1f}")
