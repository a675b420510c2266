"""A run's figures: operations, critical sections, faults by kind, violations
by invariant, and errors that no fault explains; and the table they print as."""

from __future__ import annotations

from collections import Counter
from typing import Any

from tests.torture.checker import check
from tests.torture.history import Event
from tests.torture.sections import LOCK_OPS
from tests.torture.violations import INVARIANTS

# After a fault ends, calls may still fail for this long (reconnecting).
SETTLE = 5.0


def summarize(kind: str, events: list[Event], run: Any, seconds: float) -> dict[str, Any]:
    violations = check(events)
    faults = [e for e in events if e["op"] == "fault" and e["t1"]]
    unexplained = [
        e
        for e in events
        if e["op"] in LOCK_OPS
        and e.get("error", {}).get("db")
        and not any(f["t0"] - 0.5 <= e["t1"] and e["t0"] <= f["t1"] + SETTLE for f in faults)
    ]
    writes = Counter(
        "accepted" if e.get("accepted") else "refused" if "accepted" in e else "failed"
        for e in events
        if e["op"] == "cs_write"
    )
    crashed = {
        name: process.returncode
        for name, process in run.processes.items()
        if process.returncode not in (0, -9)
    }
    return {
        "database": kind,
        "seconds": round(seconds),
        "processes": sum(1 for name in run.processes if name[1:].isdigit()),
        "operations": sum(1 for e in events if e["op"] in LOCK_OPS),
        "sections": sum(1 for e in events if e["op"] == "cs_enter"),
        "writes": dict(writes),
        "faults": dict(run.faults),
        "violations": {n: sum(1 for v in violations if v.invariant == n) for n in INVARIANTS},
        "violation_messages": [f"[{v.invariant}] {v.message}" for v in violations[:20]],
        "unexplained_errors": len(unexplained),
        "unexplained_examples": [
            f"{e['p']} {e['op']}: {e['error']['class']}: {e['error']['message']}"
            for e in unexplained[:5]
        ],
        "crashed": crashed,
        "failed_scenarios": run.failed_scenarios,
    }


def combine(summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures of several runs on one database, added up."""
    total: dict[str, Any] = dict(summaries[0])
    for summary in summaries[1:]:
        for key in ("seconds", "operations", "sections", "unexplained_errors"):
            total[key] += summary[key]
        for key in ("writes", "faults", "violations"):
            merged = Counter(total[key])
            merged.update(summary[key])
            total[key] = dict(merged)
        total["violation_messages"] = total["violation_messages"] + summary["violation_messages"]
        total["unexplained_examples"] += summary["unexplained_examples"]
        total["crashed"] = {**total["crashed"], **summary["crashed"]}
        total["failed_scenarios"] = total.get("failed_scenarios", []) + summary.get(
            "failed_scenarios", []
        )
    total["runs"] = len(summaries)
    return total


def passed(summary: dict[str, Any]) -> bool:
    if summary.get("durability", {}).get("setting", "default") != "default":
        return True  # a demonstration: violations are the expected outcome
    return (
        not any(summary["violations"].values())
        and not summary["unexplained_errors"]
        and (not summary["crashed"])
    )


def table(summary: dict[str, Any]) -> str:
    title = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}[summary["database"]]
    if "durability" in summary:
        d = summary["durability"]
        title += f" durability: {d['setting']} (fsync={d['fsync']})"
    lines = [
        f"## {title}: {summary['processes']} processes, {summary['seconds']} s"
        + (f", {summary['runs']} runs" if summary.get("runs") else ""),
        "",
        "| | |",
        "| --- | --- |",
        f"| operations | {summary['operations']:,} |",
        f"| critical sections | {summary['sections']:,} |",
        f"| fenced writes (accepted / refused / failed) | "
        f"{summary['writes'].get('accepted', 0):,} / {summary['writes'].get('refused', 0):,} / "
        f"{summary['writes'].get('failed', 0):,} |",
    ]
    for kind, count in sorted(summary["faults"].items()):
        lines.append(f"| fault: {kind} | {count} |")
    for number, name in INVARIANTS.items():
        count = summary["violations"].get(number, summary["violations"].get(str(number), 0))
        lines.append(f"| violations of {number} ({name}) | {count} |")
    lines.append(f"| database errors no fault explains | {summary['unexplained_errors']} |")
    if summary["crashed"]:
        lines.append(f"| crashed processes | {summary['crashed']} |")
    if summary.get("failed_scenarios"):
        lines.append(f"| scenarios that could not be staged | {summary['failed_scenarios']} |")
    demo = summary.get("skew_demo")
    if demo:
        lines.append(
            f"| clock skew ±1 h (demonstration) | took over a valid lock: {demo['took_over']}; "
            f"violations {demo['violations']} |"
        )
    for message in summary["violation_messages"][:10] + summary["unexplained_examples"]:
        lines.append(f"\n- {message}")
    return "\n".join(lines)
