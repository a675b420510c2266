"""The benchmark's JSON document (``docs/benchmark.json``): each part of the
run writes its own key and keeps the others."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read(path: Path) -> dict[str, Any]:
    """The document at ``path`` (empty if there is none yet)."""
    return json.loads(path.read_text()) if path.exists() else {}


def put(path: Path, key: str, value: Any) -> None:
    """Write ``value`` under ``key`` in the document at ``path``; the other keys stay."""
    document = read(path)
    document[key] = value
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=1, default=str) + "\n")
