"""The torture command: ``python -m tools.torture.runner --database sqlite``.

Runs worker processes against one database while the fault scenarios are
injected one after another, then checks the history and prints a table.
``scripts/torture.sh`` runs it for both databases. Exit code 0 when no
invariant was violated, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import django

from tools.torture.database import Mariadb, Postgres, Server

PROFILES: dict[str, dict[str, Any]] = {
    # processes, seconds of load between faults, rounds of all faults, minimum
    # seconds, and the scenarios left out per database. The short profile (CI)
    # leaves out the slow ones another database covers: skewed clocks mixing
    # with the others (the probes show the database's clock decides), and on
    # MariaDB the probes and the fast restart too.
    "short": {
        "processes": 6,
        "gap": 0.3,
        "rounds": 1,
        "seconds": 0,
        "leave_out": {
            "postgresql": {"skew"},
            "mariadb": {"skew", "skew probe", "restart fast"},
        },
        "head_faults": {"chance": 0.3, "every": 1.0},
    },
    "long": {
        "processes": 10,
        "gap": 3.0,
        "rounds": 1_000_000,
        "seconds": 1800,
        "leave_out": {},
        "head_faults": {"chance": 0.02, "every": 5.0},
    },
}
# head_faults: the mix workers' own strikes when woken as the head of a queue
# (``head_faults.py``): the chance per wake-up, and the fewest seconds between
# two strikes of one worker.


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", choices=["sqlite", "postgresql", "mariadb"])
    parser.add_argument("--profile", choices=sorted(PROFILES), default="short")
    parser.add_argument("--processes", type=int, help="worker processes (default: per profile)")
    parser.add_argument("--seconds", type=float, help="run at least this long (long profile)")
    parser.add_argument("--sections", type=int, default=0, help="... and this many sections")
    parser.add_argument(
        "--durability",
        choices=["default", "synchronous_commit=off"],
        help="PostgreSQL only: only immediate restarts under load, with these settings",
    )
    parser.add_argument("--out", type=Path, help="directory for histories and the summary")
    parser.add_argument(
        "--recheck", type=Path, help="check the histories of an earlier run's --out again"
    )
    args = parser.parse_args(argv)
    if args.recheck:
        return recheck(args.recheck)
    if not args.database:
        parser.error("--database is required")
    profile = dict(PROFILES[args.profile])
    if args.processes:
        profile["processes"] = min(max(args.processes, 1), 32)
    if args.seconds is not None:
        profile["seconds"] = args.seconds
    out = args.out or Path(tempfile.mkdtemp(prefix="dlock-torture-"))
    out.mkdir(parents=True, exist_ok=True)

    postgres: Postgres | None = None
    server: Server | None = None
    if args.database == "postgresql":
        admin = os.environ.get("DLOCK_PG_URL")
        if not admin:
            parser.error("--database postgresql needs DLOCK_PG_URL (scripts/torture.sh sets it)")
        postgres = server = Postgres(
            admin, os.environ.get("PG_CLUSTER_DIR"), os.environ.get("PG_CLUSTER_BIN")
        )
    elif args.database == "mariadb":
        admin = os.environ.get("DLOCK_MYSQL_URL")
        if not admin:
            parser.error("--database mariadb needs DLOCK_MYSQL_URL (scripts/torture.sh sets it)")
        server = Mariadb(admin, os.environ.get("MARIADB_DIR"), out / "run")
    if server is not None:
        url = server.create_database(f"torture_{os.getpid()}")
    else:
        url = f"sqlite:///{out / 'locks.sqlite3'}"
    os.environ["TORTURE_DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tools.torture.settings")
    django.setup()

    from tools.torture.report import passed, table

    if args.durability:
        summary = durability(postgres, url, out, profile, args.durability)
    else:
        summary = torture(args.database, server, url, out, profile, args.sections)
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    sys.stdout.write(table(summary) + "\n")
    sys.stdout.write(f"histories and summary.json in {out}\n")
    return 0 if passed(summary) else 1


def torture(
    kind: str,
    server: Server | None,
    url: str,
    out: Path,
    profile: dict[str, Any],
    min_sections: int,
) -> dict[str, Any]:
    from tools.torture import faults
    from tools.torture.report import summarize
    from tools.torture.run import Run

    run = Run(kind, out / "run", url, server)
    run.directory.mkdir(exist_ok=True)
    run.prepare()
    scenarios: list[tuple[str, Callable[[Run], Any]]] = [
        ("sigkill", faults.sigkill_holder),
        ("sigstop", faults.sigstop_holder),
    ]
    skipped: list[str] = []
    if server is not None and server.can_restart:
        # Early in the round: a waiter whose wait a restart broke leaves its
        # ticket queued until it expires, which the scenarios after outlast.
        scenarios += [("restart fast", faults.restart("fast"))]
        scenarios += [("restart immediate", faults.restart("immediate"))]
    elif server is not None:
        skipped.append(
            "restart (needs PG_CLUSTER_DIR of pg-cluster.sh, or MARIADB_DIR of mariadb-server.sh)"
        )
    if server is None or server.can_read_only:
        scenarios += [("read-only", faults.read_only)]
    else:
        skipped.append("read-only (the admin user cannot grant the workers a user of their own)")
    if server is not None:
        scenarios += [("terminate", faults.terminate_backends), ("skew", faults.clock_skew)]
        scenarios += [("skew probe", faults.skew_probe)]
    else:
        scenarios += [("sqlite write lock", faults.sqlite_write_lock_killed)]
    left_out = profile["leave_out"].get(kind, set())
    scenarios = [(name, scenario) for name, scenario in scenarios if name not in left_out]
    skipped += [f"{name} (left out of this profile)" for name in sorted(left_out)]
    run.spares = profile["rounds"] > 1
    faults.prespawn(run, {name for name, _ in scenarios})
    started = time.monotonic()
    run.start_workers(profile["processes"], profile.get("head_faults"))
    try:
        rounds(run, scenarios, profile, started, min_sections)
    except BaseException:
        run.stop_workers()  # never leave them running
        raise
    events = run.close()
    if profile.get("head_faults"):  # shown even where none struck
        from tools.torture.head_faults import KINDS

        run.faults |= {kind: run.faults.get(kind, 0) for kind in KINDS}
    for event in events:
        if event["op"] == "fault" and event["p"] != "runner":  # a worker's own (head_faults)
            run.faults[event["kind"]] = run.faults.get(event["kind"], 0) + 1
    summary = summarize(kind, events, run, time.monotonic() - started)
    summary["skipped"] = skipped
    if kind == "sqlite":
        summary["skew_demo"] = sqlite_skew_demo(url, out)
    return summary


def rounds(
    run: Any,
    scenarios: list[tuple[str, Callable[[Any], Any]]],
    profile: dict[str, Any],
    started: float,
    min_sections: int,
) -> None:
    """The fault scenarios one after another with a gap of load between, round
    after round until the profile's time (or sections) are reached."""
    time.sleep(profile["gap"])
    done = 0
    while done < profile["rounds"]:
        for name, scenario in scenarios:
            try:
                scenario(run)
            except (RuntimeError, OSError, subprocess.SubprocessError) as error:
                # A scenario that could not be staged (a victim that never got
                # ready) is counted and shown; the run goes on.
                run.failed_scenarios.append(f"{name}: {error}")
            run.replace_killed()
            time.sleep(profile["gap"])
        done += 1
        if time.monotonic() - started >= profile["seconds"] or (
            min_sections and _sections(run.directory) >= min_sections
        ):
            break


def sqlite_skew_demo(url: str, out: Path) -> dict[str, Any]:
    """On SQLite the database's clock is each process's own: a faked clock
    moves it too. A run of its own (own database file) shows what happens."""
    from django.db import connections

    from tools.torture import faults
    from tools.torture.checker import check
    from tools.torture.run import Run

    directory = out / "skew-demo"
    directory.mkdir(exist_ok=True)
    demo_url = f"sqlite:///{directory / 'locks.sqlite3'}"
    connections["default"].close()
    connections["default"].settings_dict["NAME"] = str(directory / "locks.sqlite3")
    run = Run("sqlite", directory, demo_url, None)
    run.prepare()
    faults.prespawn_probes(run)
    took = faults.skew_probe(run)
    violations = check(run.close())
    return {
        "took_over": took,
        "violations": dict(Counter(v.invariant for v in violations)),
        "messages": [v.message for v in violations[:5]],
    }


def durability(
    postgres: Postgres | None, url: str, out: Path, profile: dict[str, Any], setting: str
) -> dict[str, Any]:
    """Immediate restarts under load, with PostgreSQL's defaults or with
    synchronous_commit off (fsync stays as the server has it)."""
    from tools.torture import faults
    from tools.torture.report import summarize
    from tools.torture.run import Run

    assert postgres is not None and postgres.can_restart, "needs a cluster of pg-cluster.sh"
    if setting != "default":
        postgres.alter_system("synchronous_commit", "off")
    try:
        run = Run("postgresql", out / "run", url, postgres)
        run.directory.mkdir(exist_ok=True)
        run.prepare()
        started = time.monotonic()
        run.start_workers(profile["processes"])
        restart = faults.restart("immediate")
        while time.monotonic() - started < profile["seconds"]:
            time.sleep(profile["gap"])
            restart(run)
        events = run.close()
    finally:
        postgres.alter_system("synchronous_commit", None)
    summary = summarize("postgresql", events, run, time.monotonic() - started)
    summary["durability"] = {
        "setting": setting,
        "fsync": postgres.setting("fsync"),
    }
    return summary


def recheck(out: Path) -> int:
    """Run the checker again on the histories an earlier run left in ``out``
    (``out/run/*.jsonl``; the run's own figures from ``out/summary.json`` when
    it got that far, else from the histories: then crashed processes are not
    known)."""
    from types import SimpleNamespace

    from tools.torture.history import load
    from tools.torture.report import passed, summarize, table

    events = load(sorted((out / "run").glob("*.jsonl")))
    saved = out / "summary.json"
    before: dict[str, Any] = json.loads(saved.read_text()) if saved.exists() else {}
    faults = Counter(e["kind"] for e in events if e["op"] == "fault")
    names = {path.stem for path in (out / "run").glob("*.jsonl")}
    times = [t for e in events if e["p"] != "runner" for t in (e.get("t0"), e.get("t")) if t]
    run = SimpleNamespace(
        processes={name: SimpleNamespace(returncode=0) for name in names},
        faults=before.get("faults", dict(faults)),
        failed_scenarios=before.get("failed_scenarios", []),
    )
    kind = before.get("database", out.name)
    seconds = before.get("seconds", max(times, default=0) - min(times, default=0))
    summary = {**before, **summarize(kind, events, run, seconds)}
    summary["crashed"] = before.get("crashed", {})
    sys.stdout.write(table(summary) + "\n")
    return 0 if passed(summary) else 1


def _sections(directory: Path) -> int:
    return sum(path.read_text().count('"op":"cs_enter"') for path in directory.glob("*.jsonl"))


if __name__ == "__main__":
    sys.exit(main())
