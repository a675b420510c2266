"""django-dlock as another checkout has it (an older commit's worktree), measured
by ``benchmarks.acquire --compare`` in a process of its own, round by round
between this process's rounds: before and after a change, side by side on one
noisy machine.

The child imports django-dlock from the other checkout and this checkout's
``benchmarks`` package by path (the other checkout's may differ), on the same
database; it writes nothing to the schema (this process migrated).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

PACKAGE = Path(__file__).parent
# The child: this checkout's ``benchmarks`` package, loaded by path before any
# import could find the other checkout's; then ``serve()`` rounds for the parent.
_CHILD = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location(
    "benchmarks", sys.argv[1] + "/__init__.py", submodule_search_locations=[sys.argv[1]]
)
sys.modules["benchmarks"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sys.modules["benchmarks"])
from benchmarks.acquire import serve
serve(metrics=sys.argv[2] == "metrics")
"""


class OtherCheckout:
    """A child process running django-dlock's cycles from ``root``; ``round()``
    runs one round of each and answers their client CPU and wall per cycle."""

    def __init__(self, root: Path, *, metrics: bool) -> None:
        root = root.resolve()
        self.label = _describe(root)
        # cwd and PYTHONPATH: the other checkout's django_dlock comes first.
        env = {**os.environ, "PYTHONPATH": str(root)}
        self.process = subprocess.Popen(  # noqa: S603 - this interpreter, our own code
            [sys.executable, "-c", _CHILD, str(PACKAGE), "metrics" if metrics else "-"],
            cwd=root,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.names: list[str] = self._answer()

    def round(self, cycles: int) -> dict[str, tuple[float, float]]:
        """One round of each of the child's cycles: ``{name [label]: (cpu, wall)}``."""
        answers = {}
        for name in self.names:
            self._ask({"name": name, "cycles": cycles})
            cpu, wall = self._answer()
            answers[f"{name} [{self.label}]"] = (cpu, wall)
        return answers

    def close(self) -> None:
        assert self.process.stdin is not None  # noqa: S101 - opened with a pipe
        self.process.stdin.close()
        self.process.wait(30)

    def _ask(self, request: dict[str, Any]) -> None:
        stdin = self.process.stdin
        assert stdin is not None  # noqa: S101 - opened with a pipe
        stdin.write(json.dumps(request) + "\n")
        stdin.flush()

    def _answer(self) -> Any:
        stdout: IO[str] | None = self.process.stdout
        assert stdout is not None  # noqa: S101 - opened with a pipe
        line = stdout.readline()
        if not line:
            raise RuntimeError(f"the benchmark's process for {self.label} ended")
        return json.loads(line)


def _describe(root: Path) -> str:
    """``root``'s commit (short), or its directory's name."""
    done = subprocess.run(  # noqa: S603 - git, a fixed command
        ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],  # noqa: S607
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() or root.name
