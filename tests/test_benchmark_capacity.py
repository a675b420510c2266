"""``tools.cluster.capacity --json``: its rows go into the benchmark JSON under
"capacity", beside what the other parts of the benchmark wrote."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.cluster.capacity import APP_HOSTS, Row, save

pytestmark = pytest.mark.vendor_independent


def test_the_rows_join_the_other_parts_of_the_benchmark_json(tmp_path: Path) -> None:
    path = tmp_path / "benchmark.json"
    path.write_text(json.dumps({"uncontended": [1, 2], "kinds": {"old": True}}))
    row = Row(8, "own", 1200.0, 600.0, 0.5, 0.1, 0.05, 0.9)
    save([row], 10.0, path)
    document = json.loads(path.read_text())
    assert (document["uncontended"], document["kinds"]) == ([1, 2], {"old": True})
    capacity = document["capacity"]
    assert (capacity["app_hosts"], capacity["seconds"]) == (APP_HOSTS, 10.0)
    assert capacity["rows"] == [
        {
            "clients": 8,
            "resources": "own",
            "operations": 1200.0,
            "acquisitions": 600.0,
            "leader_cpu": 0.5,
            "replicas_cpu": 0.1,
            "pgbouncer_cpu": 0.05,
            "machine_busy": 0.9,
        }
    ]
    save([], 5.0, tmp_path / "new" / "benchmark.json")  # no file yet: made
    assert json.loads((tmp_path / "new" / "benchmark.json").read_text())["capacity"]["rows"] == []
