"""What a benchmark run does (``Plan``) and what it runs against (``Servers``)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import setup
from benchmarks.proxy import DelayProxy

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Plan:
    quick: bool
    rounds: int
    seconds: float  # per contender and round, single client
    client_counts: tuple[int, ...]
    client_rounds: int
    client_seconds: float
    contention_seconds: float
    contention_rounds: int
    wakeup_samples: int
    wakeup_hold: tuple[float, float]
    purge_rows: int
    delay: float
    json_path: Path
    chart_path: Path


def plan_from(args: argparse.Namespace) -> Plan:
    quick = args.quick
    artifacts = ROOT / "artifacts"
    return Plan(
        quick=quick,
        rounds=3 if quick else 7,
        seconds=0.3 if quick else 1.0,
        client_counts=(1, 8, 32) if quick else (1, 8, 32, 64),
        client_rounds=1 if quick else 3,
        client_seconds=1.0 if quick else 3.0,
        contention_seconds=1.0 if quick else 3.0,
        contention_rounds=1 if quick else 3,
        wakeup_samples=3 if quick else 10,
        wakeup_hold=(0.1, 0.3) if quick else (0.3, 1.2),
        purge_rows=args.purge_rows or (100_000 if quick else 1_000_000),
        delay=args.delay_ms / 1000,
        json_path=args.json
        or (artifacts / "benchmark-quick.json" if quick else ROOT / "docs/benchmark.json"),
        chart_path=args.chart
        or (artifacts / "benchmark-quick.png" if quick else ROOT / "docs/benchmark.png"),
    )


@dataclass
class Servers:
    postgres: dict[str, Any]
    postmaster: int
    redis: setup.RedisServer
    pg_proxy: DelayProxy
    redis_proxy: DelayProxy
    cpu: dict[str, Callable[[], float]] = field(default_factory=dict)
