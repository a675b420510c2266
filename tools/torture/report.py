"""A run's figures: operations, critical sections by kind, readers that held
together, faults by kind, violations by invariant, and errors that no fault
explains; and the table they print as."""

from __future__ import annotations

from collections import Counter
from typing import Any

from tools.torture.check_delays import losses
from tools.torture.check_holds import reader_overlaps
from tools.torture.check_priorities import grants
from tools.torture.checker import check
from tools.torture.history import Event
from tools.torture.sections import LOCK_OPS, History, read
from tools.torture.violations import INVARIANTS, Violation

# After a fault ends, calls may still fail for this long (reconnecting).
SETTLE = 5.0
# What a lock call may raise besides a database error: a wait that timed out
# or a refused upgrade, a handle found lost, a renew of nothing, a wait that
# would have closed a cycle. (A LockHeldByCaller is invariant 9's.) Anything
# else is a failure of the run.
EXPECTED = {"LockNotAcquired", "LockHeldByCaller", "LockExpired", "DoesNotExist"}
EXPECTED |= {"LockDeadlock"}
KINDS = ("exclusive", "shared", "permit", "leader")
DELAYS = ("taken", "expired", "forced", "checked")
PRIORITIES = ("waits", "queued", "checked", "ahead")
BOUND = ("committed", "rolled_back", "deadlocks")
GUARDED = ("committed", "refused", "error")
TITLES = {"sqlite": "SQLite", "postgresql": "PostgreSQL", "mariadb": "MariaDB"}


def examples(violations: list[Violation], per_invariant: int = 3) -> list[str]:
    """A few messages of each invariant's violations."""
    shown: Counter[int] = Counter()
    messages = []
    for violation in violations:
        shown[violation.invariant] += 1
        if shown[violation.invariant] <= per_invariant:
            messages.append(f"[{violation.invariant}] {violation.message}")
    return messages


def summarize(kind: str, events: list[Event], run: Any, seconds: float) -> dict[str, Any]:
    violations = check(events)
    faults = [e for e in events if e["op"] == "fault" and e["t1"]]
    unexplained = [
        e
        for e in events
        if e["op"] in LOCK_OPS
        and e.get("error", {}).get("db")
        and not any(_explains(f, e) for f in faults)
    ]
    writes = _answers(events, "cs_write")
    reads = _answers(events, "cs_read")
    other = [
        e
        for e in events
        if e["op"] in LOCK_OPS
        and "error" in e
        and not e["error"].get("db")
        and e["error"]["class"] not in EXPECTED
    ]
    entered = [e for e in events if e["op"] == "cs_enter"]
    history = read(events)
    readers, together = reader_overlaps(history)
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
        "sections": len(entered),
        "kinds": dict(Counter(e.get("kind", "exclusive") for e in entered)),
        "in_sets": sum(1 for e in entered if e.get("set")),
        "readers": {"sections": readers, "overlapping pairs": together},
        "writes": dict(writes),
        "reads": dict(reads),
        "throttle_uses": dict(_answers(events, "throttle", "granted")),
        "once_per_runs": dict(_answers(events, "once_per", "due")),
        "lock_delays": _lock_delays(history),
        "priorities": _priorities(events, history),
        "bound": _bound(events),
        "guarded": _guarded(events),
        "faults": dict(run.faults),
        "violations": {n: sum(1 for v in violations if v.invariant == n) for n in INVARIANTS},
        "violation_messages": examples(violations),
        "other_errors": len(other),
        "other_examples": [
            f"{e['p']} {e['op']}: {e['error']['class']}: {e['error']['message']}" for e in other[:5]
        ],
        "unexplained_errors": len(unexplained),
        "unexplained_examples": [
            f"{e['p']} {e['op']}: {e['error']['class']}: {e['error']['message']}"
            for e in unexplained[:5]
        ],
        "crashed": crashed,
        "failed_scenarios": run.failed_scenarios,
    }


def _explains(fault: Event, error: Event) -> bool:
    """Whether ``fault`` may explain the database ``error`` of a call: the
    call overlaps it (or the ``SETTLE`` after); a fault struck by a worker
    on itself (``only_scope``) explains its own errors only."""
    if fault.get("only_scope") and fault.get("scope") != error["p"]:
        return False
    return bool(fault["t0"] - 0.5 <= error["t1"] and error["t0"] <= fault["t1"] + SETTLE)


def _lock_delays(history: History) -> dict[str, int]:
    """Holds taken with a lock-delay: all, lost (expired or force-released),
    and lost ones followed by a grant that invariant 16 checked."""
    lost = list(losses(history))
    taken = sum(
        1
        for acquisitions in history.acquisitions.values()
        for a in acquisitions
        if a.event.get("lock_delay") and not a.regrant
    )
    forced = sum(1 for loss in lost if loss.forced)
    checked = sum(1 for loss in lost if loss.following is not None)
    return {"taken": taken, "expired": len(lost) - forced, "forced": forced, "checked": checked}


def _priorities(events: list[Event], history: History) -> dict[str, int]:
    """Waits with a priority: all, those that queued, the grants that invariant
    17 judged, and the waiters it found provably still queued ahead of them."""
    judged = list(grants(history))
    return {
        "waits": sum(1 for e in events if e["op"] == "lock" and "priority" in e),
        "queued": sum(1 for e in events if e["op"] == "queued" and "priority" in e),
        "checked": len(judged),
        "ahead": sum(len(grant.ahead) for grant in judged),
    }


def _bound(events: list[Event]) -> dict[str, int]:
    """Holds bound to a transaction (``until="commit"``) released after the
    commit and after a rollback, and waits refused as deadlocks."""
    ends = Counter(
        "rolled_back" if e["rolled_back"] else "committed"
        for e in events
        if e["op"] == "unlock" and "rolled_back" in e and e.get("result") == "released"
    )
    deadlocks = sum(
        1 for e in events if e["op"] == "lock" and e.get("error", {}).get("class") == "LockDeadlock"
    )
    return dict(ends) | {"deadlocks": deadlocks}


def _answers(events: list[Event], op: str, answer: str = "accepted") -> Counter[str]:
    """Fenced writes or reads, throttle uses (``granted``), once_per and
    min_hold runs (``due``): accepted, refused, failed (an error)."""
    return Counter(
        "accepted" if e.get(answer) else "refused" if answer in e else "failed"
        for e in events
        if e["op"] == op
    )


def combine(summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures of several runs on one database, added up."""
    total: dict[str, Any] = dict(summaries[0])
    for summary in summaries[1:]:
        for key in ("seconds", "operations", "sections", "in_sets"):
            total[key] += summary.get(key, 0)
        for key in ("unexplained_errors", "other_errors"):
            total[key] += summary.get(key, 0)
        merged_keys: tuple[str, ...] = ("writes", "reads", "throttle_uses", "once_per_runs")
        merged_keys += ("lock_delays", "priorities", "bound", "guarded")
        for key in (*merged_keys, "faults", "violations", "kinds", "readers"):
            merged = Counter(total.get(key, {}))
            merged.update(summary.get(key, {}))
            total[key] = dict(merged)
        for key in ("violation_messages", "unexplained_examples", "other_examples"):
            total[key] = total.get(key, []) + summary.get(key, [])
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
        and not summary.get("other_errors")
        and not summary["crashed"]
    )


def _three(counts: dict[str, int]) -> str:
    """accepted / refused / failed"""
    return " / ".join(f"{counts.get(key, 0):,}" for key in ("accepted", "refused", "failed"))


def _guarded(events: list[Event]) -> dict[str, int]:
    """How the guarded writes (``guarded.py``) ended."""
    ended = Counter(
        "committed" if e.get("committed") else "refused" if "refused" in e else "error"
        for e in events
        if e["op"] == "guarded_write"
    )
    return dict(ended)


def _figures(counts: dict[str, int], keys: tuple[str, ...]) -> str:
    return " / ".join(f"{counts.get(key, 0):,}" for key in keys)


def table(summary: dict[str, Any]) -> str:
    title = TITLES[summary["database"]]
    if "durability" in summary:
        d = summary["durability"]
        title += f" durability: {d['setting']} (fsync={d['fsync']})"
    kinds = summary.get("kinds", {})
    readers = summary.get("readers", {})
    lines = [
        f"## {title}: {summary['processes']} processes, {summary['seconds']} s"
        + (f", {summary['runs']} runs" if summary.get("runs") else ""),
        "",
        "| | |",
        "| --- | --- |",
        f"| operations | {summary['operations']:,} |",
        f"| critical sections | {summary['sections']:,} |",
        f"| of them exclusive / shared / permit / leader | "
        f"{' / '.join(f'{kinds.get(kind, 0):,}' for kind in KINDS)} |",
        f"| of them parts of all-or-nothing sets | {summary.get('in_sets', 0):,} |",
        f"| reader sections / pairs of readers that held together | "
        f"{readers.get('sections', 0):,} / {readers.get('overlapping pairs', 0):,} |",
        f"| fenced writes (accepted / refused / failed) | {_three(summary['writes'])} |",
        f"| fenced reads (accepted / refused / failed) | {_three(summary.get('reads', {}))} |",
        f"| throttle uses (granted / refused / failed) | "
        f"{_three(summary.get('throttle_uses', {}))} |",
        f"| once_per and min_hold runs (due / not due / failed) | "
        f"{_three(summary.get('once_per_runs', {}))} |",
        f"| holds with a lock-delay (taken / lost: expired / force-released / next grant "
        f"checked) | {_figures(summary.get('lock_delays', {}), DELAYS)} |",
        f"| waits with a priority (all / queued / grants checked / waiters found ahead) | "
        f"{_figures(summary.get('priorities', {}), PRIORITIES)} |",
        f"| until='commit' holds released after a commit / a rollback; deadlocks refused | "
        f"{_figures(summary.get('bound', {}), BOUND)} |",
        f"| guarded writes, held.atomic() (committed / refused / ended by an error) | "
        f"{_figures(summary.get('guarded', {}), GUARDED)} |",
    ]
    for kind, count in sorted(summary["faults"].items()):
        lines.append(f"| fault: {kind} | {count} |")
    for number, name in INVARIANTS.items():
        count = summary["violations"].get(number, summary["violations"].get(str(number), 0))
        lines.append(f"| violations of {number} ({name}) | {count} |")
    lines.append(f"| database errors no fault explains | {summary['unexplained_errors']} |")
    lines.append(f"| other exceptions of lock calls | {summary.get('other_errors', 0)} |")
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
    notes = summary["violation_messages"][:36] + summary["unexplained_examples"]
    for message in notes + summary.get("other_examples", []):
        lines.append(f"\n- {message}")
    return "\n".join(lines)
