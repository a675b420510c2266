"""The torture's strikes of a head woken by a release (``tools/torture/head_faults.py``):
a real process stops itself for a span and resumes, or kills itself, each
written down as a fault of its own; and such a fault excuses only its own
process's database errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tools.torture.head_faults import KILLED, LONG, SHORT, TURNS
from tools.torture.history import Event, load
from tools.torture.report import _explains

ROOT = Path(__file__).resolve().parents[1]
STRIKE = """
import sys
from types import SimpleNamespace
from tools.torture.head_faults import HeadFaults
from tools.torture.history import Recorder
faults = HeadFaults(Recorder(sys.argv[1], "w1"), {"chance": 1, "turn": int(sys.argv[2])})
wait = SimpleNamespace(claim=SimpleNamespace(resource="r0", owner="w1.1"))
faults.strike(wait, "after")
print("resumed")
"""


def _strike(tmp_path: Path, turn: int) -> tuple[subprocess.CompletedProcess[str], list[Event]]:
    history = tmp_path / "w1.jsonl"
    done = subprocess.run(
        [sys.executable, "-c", STRIKE, str(history), str(turn)],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    return done, load([history])


def test_a_stopped_head_resumes_and_records_its_span(tmp_path: Path) -> None:
    done, events = _strike(tmp_path, TURNS.index(LONG))
    assert done.returncode == 0 and done.stdout == "resumed\n"
    [fault] = events
    assert fault["kind"] == LONG and fault["scope"] == "w1" and fault["only_scope"]
    assert fault["t1"] - fault["t0"] > 1.0 and fault["moment"] == "after"


def test_a_killed_head_dies_after_recording_it(tmp_path: Path) -> None:
    done, events = _strike(tmp_path, TURNS.index(KILLED))
    assert done.returncode == -9 and done.stdout == ""
    assert [(e["op"], e.get("kind")) for e in events] == [("fault", KILLED), ("killed", None)]
    assert events[1]["target"] == "w1"


def test_a_heads_fault_explains_its_own_errors_only() -> None:
    fault = {"op": "fault", "kind": SHORT, "t0": 10.0, "t1": 10.5, "scope": "w1"}
    fault["only_scope"] = True
    own = {"p": "w1", "op": "acquire", "t0": 10.1, "t1": 10.6}
    assert _explains(fault, own)
    assert not _explains(fault, own | {"p": "w2"})
    assert _explains({k: v for k, v in fault.items() if k != "only_scope"}, own | {"p": "w2"})
