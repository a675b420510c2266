"""The hot lock on MariaDB (issue 46): 8 processes on one resource, a 1 ms
hold, blocking acquire, django-dlock's ``lock()`` beside MariaDB's own
``GET_LOCK``; each beside one process alone doing the same (the share of one
process alone), and the wake-up after a release. Interleaved rounds, medians.

    source scripts/mariadb-server.sh && mariadb_start
    DATABASE_URL=$DLOCK_MYSQL_URL python -m benchmarks.hot_mariadb [--rounds 3] [--seconds 3]
        [--json artifacts/hot-mariadb.json]

Prints a table; writes JSON only where ``--json`` names a file (never
docs/benchmark.json by itself).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path
from typing import Any

from benchmarks import clients
from benchmarks.acquire import configure
from benchmarks.hot import DlockHot, mariadb_hot_locks

PROCESSES = 8
HOLD = 0.001


class PollingDlockHot(DlockHot):
    """django-dlock with ``DLOCK_LISTEN = False``: no gates, the head polls (as
    before issue 46). It sets the setting in the process that makes it (a
    contender's, or the parent for the wake-up's holder: the last row)."""

    def __init__(self, using: str, owner: str) -> None:
        from django.conf import settings

        from django_dlock.conf import conf

        settings.DLOCK_LISTEN = False
        conf.forget()  # read before the fork, and kept
        super().__init__(using, owner)


def measure(rounds: int, seconds: float, samples: int) -> dict[str, dict[str, Any]]:
    locks = {
        **mariadb_hot_locks("default"),
        "django-dlock, polling": (lambda o: PollingDlockHot("default", o), True),
    }
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in locks}
    for number in range(rounds):
        print(f"  round {number + 1}/{rounds}", flush=True)
        for name, (make, _) in locks.items():
            alone = clients.contention(make, True, 1, seconds, HOLD)
            crowd = clients.contention(make, True, PROCESSES, seconds, HOLD)
            crowd["share"] = crowd["acquisitions_per_s"] / max(alone["acquisitions_per_s"], 1e-9)
            crowd["alone_per_s"] = alone["acquisitions_per_s"]
            runs[name].append(crowd)
    results = {}
    for name, (make, _) in locks.items():
        print(f"  wake-up: {name}", flush=True)
        median = sorted(runs[name], key=lambda run: run["share"])[len(runs[name]) // 2]
        wake = sorted(clients.wakeup(make, samples, (0.05, 0.15)))
        results[name] = {
            "acquisitions_per_s": statistics.median(r["acquisitions_per_s"] for r in runs[name]),
            "alone_per_s": statistics.median(r["alone_per_s"] for r in runs[name]),
            "share": statistics.median(r["share"] for r in runs[name]),
            "shares": [r["share"] for r in runs[name]],
            "jain": median["jain"],
            "turns": median["turns"],
            "wake_p50_ms": statistics.median(wake) * 1000,
            "wake_max_ms": wake[-1] * 1000,
        }
    return results


def print_table(results: dict[str, dict[str, Any]]) -> None:
    print(f"\n{PROCESSES} processes, one resource, {HOLD * 1000:g} ms hold, blocking (MariaDB)")
    print(
        f"{'':<22} {'acq/s':>6} {'alone/s':>7} {'share':>6} {'rounds':>17} {'Jain':>6} "
        f"{'wake p50':>9} {'max':>7}"
    )
    for name, row in results.items():
        rounds = "/".join(f"{share:.2f}" for share in row["shares"])
        print(
            f"{name:<22} {row['acquisitions_per_s']:>6.0f} {row['alone_per_s']:>7.0f} "
            f"{row['share']:>5.2f}x {rounds:>17} {row['jain']:>6.3f} "
            f"{row['wake_p50_ms']:>6.1f} ms {row['wake_max_ms']:>4.0f} ms"
        )
    print(f"load average: {' '.join(f'{load:.1f}' for load in os.getloadavg())}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.hot_mariadb")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--wake-samples", type=int, default=20)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    configure()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    results = measure(args.rounds, args.seconds, args.wake_samples)
    print_table(results)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
