"""``benchmarks.kinds``'s goals (issues 21, 22 and 26), its terminal tables and its chart."""

from __future__ import annotations

import operator
import statistics
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from benchmarks.kinds_setup import LABELS
from benchmarks.report import _fmt

AT_LEAST, AT_MOST = "≥", "≤"


def _goal(
    database: str, figure: str, value: float | None, sign: str, bound: float, unit: str
) -> dict[str, Any]:
    compare: Callable[[float, float], bool] = operator.ge if sign == AT_LEAST else operator.le
    return {
        "database": database,
        "figure": figure,
        "value": value,
        "goal": f"{sign} {bound:g}{unit}",
        "bound": bound,
        "sign": sign,
        "unit": unit,
        "met": None if value is None else compare(value, bound),
    }


# What an exclusive cycle should reach of each database's raw floor (issue 26).
FLOOR_GOALS = {"postgresql": 0.65, "sqlite": 0.6, "mariadb": 0.5}

Figure = tuple[str, str, float, str, float | None]  # name, sign, bound, unit, value


def goals(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Each goal's figure on each database, and whether it is met."""
    return [
        _goal(database, name, value, sign, bound, unit)
        for database in results["databases"]
        for name, sign, bound, unit, value in _figures(results, database)
    ]


def paired(
    rows: dict[str, dict[str, Any]], name: str, reference: str, key: str = "rounds"
) -> float:
    """The median over rounds of ``name``'s figure divided by ``reference``'s in
    the same round (a round measures them a second or two apart: the machine's
    drift from round to round cancels out)."""
    ratios = [
        mine / theirs for mine, theirs in zip(rows[name][key], rows[reference][key], strict=True)
    ]
    return float(statistics.median(ratios))


def _figures(results: dict[str, Any], database: str) -> Iterator[Figure]:
    cycles = {row["name"]: row for row in results.get("cycles", []) if row["database"] == database}
    if cycles:
        shared, permit = (
            paired(cycles, "shared", "exclusive"),
            paired(cycles, "permit", "exclusive"),
        )
        yield "shared cycle x exclusive", AT_LEAST, 0.8, "x", shared
        yield "permit cycle x exclusive", AT_LEAST, 0.8, "x", permit
        speed = paired(cycles, "3 single acquires", "acquire_all of 3", "acquire_rounds_ms")
        yield "acquire_all of 3 x 3 single acquires (speed)", AT_LEAST, 0.5, "x", speed
        of_floor = paired(cycles, "exclusive", "floor")
        yield (
            "exclusive cycle x raw floor",
            AT_LEAST,
            FLOOR_GOALS[database],
            "x",
            of_floor,
        )
    counts = results.get("operations", {}).get(database)
    if counts and database != "sqlite":  # SQLite has no round trips
        trips = counts["reentrant re-entry"]["round_trips"]
        yield "reentrant re-entry, round trips", AT_MOST, 1, "", trips
    readers = results.get("readers", {}).get(database)
    if readers:
        yield (
            "8 readers + 1 writer: readers x one alone",
            AT_LEAST,
            4,
            "x",
            readers["readers_x_single"],
        )
        yield "writer's wait p99, in 1 ms holds", AT_MOST, 10, "", readers["writer_wait_p99_holds"]
    permits = results.get("semaphore", {}).get(database)
    if permits:
        yield "16 on a semaphore of 4: share of ideal", AT_LEAST, 0.8, "", permits["share_of_ideal"]
        yield "16 on a semaphore of 4: Jain", AT_LEAST, 0.9, "", permits["jain"]
    leader = results.get("leader", {}).get(database)
    if leader:
        ttl = leader["ttl_s"]
        yield (
            "leader killed: next term after (max), s",
            AT_MOST,
            ttl + 1,
            " s",
            leader["kill_max_s"],
        )
        yield (
            "leader resigned: next term after (p50), ms",
            AT_MOST,
            50,
            " ms",
            leader["resign_p50_ms"],
        )


# -- terminal tables ---------------------------------------------------------------


def print_tables(results: dict[str, Any]) -> None:
    machine = results["machine"]
    print(
        f"\nLock kinds, {machine['date']}: {machine['nproc']} cores ({machine['cpu']}); load average "
        f"{' '.join(f'{x:.1f}' for x in machine['load_average'])} at the start, "
        f"{' '.join(f'{x:.1f}' for x in machine['load_average_end'])} at the end\n"
        f"{', '.join(results['versions'].values())}; Python {machine['python']}, Django {machine['django']}"
        + ("  [--quick]" if results.get("quick") else "")
    )
    for rerun in results.get("reruns", []):
        again = rerun["machine"]
        print(
            f"measured again: {', '.join(rerun['sections'])} on {', '.join(rerun['databases'])}, "
            f"{again['date']}, load average {again['load_average'][0]:.1f} at the start, "
            f"{again['load_average_end'][0]:.1f} at the end"
        )
    if "cycles" in results:
        order = {database: index for index, database in enumerate(results["databases"])}
        rows = sorted(results["cycles"], key=lambda row: order[row["database"]])
        _cycles(rows, results.get("operations", {}))
    if "operations" in results:
        _operations(results["operations"])
    if "readers" in results:
        _readers(results["readers"])
    if "semaphore" in results:
        _semaphore(results["semaphore"])
    if "leader" in results:
        _leader(results["leader"])
    _goals(results["goals"])


def _cycles(rows: list[dict[str, Any]], operations: dict[str, Any]) -> None:
    print(
        "\nOne client, acquire + release cycles (medians of interleaved rounds; a ratio is the "
        "median of the rounds' ratios)"
    )
    header = (
        f"{'cycle':<20} {'cycles/s':>9} {'x excl':>7} {'x floor':>8} {'acquire ms':>10} "
        f"{'cycle ms':>9} {'client CPU ms':>13} {'DB CPU ms':>10} {'RT acq+rel':>10} {'stmts acq+rel':>13}"
    )
    pairs = {
        "exclusive": ("exclusive acquire", "exclusive release"),
        "shared": ("shared acquire", "shared release"),
        "permit": ("permit acquire", "permit release"),
        "reentrant re-entry": ("reentrant re-entry", "re-entry's release (decrement)"),
        "acquire_all of 3": ("acquire_all of 3", "release_all of 3"),
    }
    for database in dict.fromkeys(row["database"] for row in rows):
        group = {row["name"]: row for row in rows if row["database"] == database}
        counts = operations.get(database, {})
        print(f"-- {LABELS[database]}\n{header}")
        for name, row in group.items():
            pair = pairs.get(name)
            trips = statements = None
            if pair and counts:
                trips = _sum(counts[pair[0]]["round_trips"], counts[pair[1]]["round_trips"])
                key = "server_statements" if database == "postgresql" else "django_statements"
                statements = _sum(counts[pair[0]][key], counts[pair[1]][key])
            print(
                f"{name:<20} {row['cycles_per_s']:>9,.0f} "
                f"{paired(group, name, 'exclusive'):>7.2f} {paired(group, name, 'floor'):>8.2f} "
                f"{_fmt(row['acquire_p50_ms'], '>10.2f')} {row['cycle_p50_ms']:>9.2f} "
                f"{row['client_cpu_ms']:>13.3f} {_fmt(row['server_cpu_ms'], '>10.3f')} "
                f"{_fmt(trips, '>10.1f')} {_fmt(statements, '>13.1f')}"
            )


def _sum(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a + b


def _operations(operations: dict[str, dict[str, dict[str, float | None]]]) -> None:
    print(
        "\nOne operation: round trips and statements (PostgreSQL: what the server ran, counted at"
    )
    print("the proxy; Django's query log, BEGIN and COMMIT included, on every database)")
    databases = list(operations)
    print(f"{'operation':<32}" + "".join(f"{LABELS[d] + ' RT / stmts':>26}" for d in databases))
    names = next(iter(operations.values())).keys()
    for name in names:
        cells = []
        for database in databases:
            figures = operations[database][name]
            server = figures["server_statements"]
            statements = (
                f"{server:.1f} ({figures['django_statements']:.1f})"
                if server is not None
                else f"{figures['django_statements']:.1f}"
            )
            cells.append(f"{_fmt(figures['round_trips'], '.1f')} / {statements}")
        print(f"{name:<32}" + "".join(f"{cell:>26}" for cell in cells))


def _readers(readers: dict[str, dict[str, Any]]) -> None:
    print(
        "\n8 reader processes and 1 writer (a write every ~10 holds), 1 ms holds "
        "(the median of interleaved rounds)"
    )
    print(
        f"{'database':<11} {'alone/s':>7} {'8 readers/s':>11} {'x alone':>7} {'rounds':>15} "
        f"{'no writer':>9} {'at once':>9} {'writer wait p50/p99/max, holds':>32}"
    )
    for database, row in readers.items():
        rounds = " ".join(f"{x:.1f}" for x in row["rounds"])
        print(
            f"{LABELS[database]:<11} {row['single_reader_per_s']:>7,.0f} {row['readers_per_s']:>11,.0f} "
            f"{row['readers_x_single']:>7.2f} {rounds:>15} "
            f"{row['readers_without_writer_x_single']:>9.2f} "
            f"{row['readers_at_once_mean']:>3.1f} / {row['readers_at_once_most']:<3} "
            f"{row['writer_wait_p50_holds']:>10.1f} / {row['writer_wait_p99_holds']:.1f} / "
            f"{row['writer_wait_max_holds']:.1f} ({row['writer_turns']} writes)"
        )
    print(
        "(no writer: 8 readers alone, x one alone; at once: readers holding together, mean / most "
        "(with the writer); readers that asked after the writer "
        "and held before it, per write: "
        + ", ".join(
            f"{LABELS[database]} {row['overtaking_readers_mean']:.1f} / {row['overtaking_readers_most']}"
            for database, row in readers.items()
        )
        + ", mean / most)"
    )
    _turn_costs(readers, "one reader alone", "8 readers + writer")


def _turn_costs(rows: dict[str, dict[str, Any]], alone: str, crowd: str) -> None:
    print(
        f"{'database':<11} {'':<20} {'lock() ms':>9} {'release ms':>10} "
        f"{'client CPU ms/turn':>18} {'DB CPU ms/turn':>14} {'statements/turn':>15}"
    )
    for database, row in rows.items():
        for name, key in ((alone, "alone"), (crowd, "crowd")):
            figures = row[key]
            print(
                f"{LABELS[database]:<11} {name:<20} {_fmt(figures['lock_ms'], '>9.1f')} "
                f"{_fmt(figures['release_ms'], '>10.1f')} {figures['client_cpu_ms']:>18.2f} "
                f"{_fmt(figures['server_cpu_ms'], '>14.2f')} {figures['statements']:>15.1f}"
            )
    print(
        "(the median lock() and release call; per turn, the CPU of all the processes and the "
        "statements sent through Django's cursor: COMMIT, and BEGIN but on SQLite, not among them)"
    )


def _semaphore(semaphore: dict[str, dict[str, Any]]) -> None:
    print("\n16 processes on a semaphore of 4, 1 ms holds (the median of interleaved rounds)")
    print(
        f"{'database':<11} {'alone/s':>7} {'16 turns/s':>10} {'x 4 alone':>9} {'rounds':>16} "
        f"{'x 4 processes':>13} {'Jain':>6}"
    )
    for database, row in semaphore.items():
        rounds = " ".join(f"{x:.0%}" for x in row["rounds"])
        print(
            f"{LABELS[database]:<11} {row['alone_per_s']:>7,.0f} {row['per_s']:>10,.0f} "
            f"{row['share_of_ideal']:>9.0%} {rounds:>16} "
            f"{row['share_of_limit_processes']:>13.0%} {row['jain']:>6.3f}"
        )
    _turn_costs(semaphore, "one process alone", "16 processes")


def _leader(leader: dict[str, dict[str, Any]]) -> None:
    print("\nLeader hand-over (ttl 3 s, auto-renewed, standby in lock(timeout=inf))")
    for database, row in leader.items():
        kills = ", ".join(f"{x:.2f}" for x in row["kill_s"])
        late = ", ".join(f"{x:.0f}" for x in row["kill_expiry_to_term_ms"])
        print(
            f"{LABELS[database]:<11} resign to next term p50 {row['resign_p50_ms']:.1f} ms, max "
            f"{row['resign_max_ms']:.1f} ms (from the release returning: p50 "
            f"{row['release_to_term_p50_ms']:.1f} ms); SIGKILL to next term {kills} s "
            f"(after the lease's expiry: {late} ms)"
        )


def _goals(found: list[dict[str, Any]]) -> None:
    print("\nGoals")
    databases = list(dict.fromkeys(goal["database"] for goal in found))
    figures = list(dict.fromkeys(goal["figure"] for goal in found))
    by_key = {(goal["database"], goal["figure"]): goal for goal in found}
    print(f"{'figure':<46} {'goal':>16}" + "".join(f"{LABELS[d]:>16}" for d in databases))
    for figure in figures:
        bounds = dict.fromkeys(goal["goal"] for goal in found if goal["figure"] == figure)
        cells = []
        for database in databases:
            goal = by_key.get((database, figure))
            if goal is None or goal["value"] is None:
                cells.append(f"{'-':>16}")
                continue
            mark = "met" if goal["met"] else "MISSED"
            cells.append(f"{goal['value']:>9.2f} {mark:>6}")
        print(f"{figure:<46} {' / '.join(bounds):>16}" + "".join(cells))


# -- chart ---------------------------------------------------------------------------


def chart(found: list[dict[str, Any]], path: Path) -> None:
    """Each goal's figure divided by its goal (goals of "at most": the goal
    divided by the figure), so that 1 and beyond meets it, by database."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [goal for goal in found if goal["value"]]
    figures = list(dict.fromkeys(goal["figure"] for goal in shown))
    databases = list(dict.fromkeys(goal["database"] for goal in shown))
    palette = {"postgresql": "#4c72b0", "sqlite": "#55a868", "mariadb": "#c44e52"}
    figure, axis = plt.subplots(figsize=(9, 0.2 * len(figures) * len(databases) + 1.5))
    height = 0.8 / max(len(databases), 1)
    for offset, database in enumerate(databases):
        positions, values = [], []
        for index, name in enumerate(figures):
            goal = next(
                (g for g in shown if g["figure"] == name and g["database"] == database), None
            )
            if goal is None:
                continue
            ratio = (
                goal["value"] / goal["bound"]
                if goal["sign"] == AT_LEAST
                else goal["bound"] / goal["value"]
            )
            positions.append(index + offset * height)
            values.append(ratio)
        axis.barh(positions, values, height=height, color=palette[database], label=LABELS[database])
    axis.set_yticks([i + 0.4 - height / 2 for i in range(len(figures))], figures, fontsize=8)
    axis.invert_yaxis()
    axis.axvline(1.0, color="black", linewidth=0.8)
    axis.set_xscale("log")
    axis.set_xlabel("figure / goal (goals of 'at most': goal / figure); 1 and beyond meets it")
    axis.set_title("Lock kinds against their goals", fontsize=10)
    axis.legend(fontsize=8)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
