"""The contract on a Patroni cluster behind HAProxy and PgBouncer, with app
hosts in network namespaces. Needs root; runs with DLOCK_CLUSTER=1
(``scripts/cluster.sh test``), which installs the Debian packages if missing.
DLOCK_CLUSTER_FULL=1 runs the whole PgBouncer scenario instead of its core."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    os.environ.get("DLOCK_CLUSTER") != "1",
    reason="the cluster tests need root: DLOCK_CLUSTER=1 (scripts/cluster.sh test)",
)

CORE_FILES = [
    "tests/test_managers.py",
    "tests/test_concurrency.py",
    "tests/test_kinds_reentrant.py",
    "tests/test_kinds_shared.py",
    "tests/test_kinds_semaphore.py",
    "tests/test_kinds_several.py",
    "tests/test_kinds_leader.py",
]
FULL_FILES = [
    *CORE_FILES,
    "tests/test_locking.py",
    "tests/test_api.py",
    "tests/test_contrib_celery.py",
]
# It kills the renewer's server backend and expects the renewer's connection to
# break. Behind a pooler only the server connection breaks: the renewer's
# connection to PgBouncer survives and its next renewal succeeds, as it should.
DIRECT_CONNECTION_ONLY = [
    "tests/test_locking.py::test_renewer_reports_its_connection_killed",
]


@pytest.fixture(scope="module")
def cluster() -> Iterator[object]:
    from tools.cluster.apps import migrate
    from tools.cluster.cluster import Cluster

    running = Cluster.up(app_hosts=2)
    try:
        migrate(running)
        yield running
    finally:
        running.down()


def test_the_contract_holds_through_pgbouncer(cluster: object) -> None:
    """The suite's own tests, run from an app host through its link and
    PgBouncer in transaction pooling (no session state may be relied on)."""
    import psycopg

    from tools.cluster.apps import REPOSITORY, app_env
    from tools.cluster.cluster import Cluster

    assert isinstance(cluster, Cluster)
    # The test database exists already: created through a pooler, it could
    # not be dropped while PgBouncer keeps server connections to it.
    with psycopg.connect(cluster.primary_url("postgres"), autocommit=True) as connection:
        connection.execute("DROP DATABASE IF EXISTS test_dlock")
        connection.execute("CREATE DATABASE test_dlock")
    host = cluster.hosts[0]
    files = FULL_FILES if os.environ.get("DLOCK_CLUSTER_FULL") == "1" else CORE_FILES
    deselect = [f"--deselect={test}" for test in DIRECT_CONNECTION_ONLY]
    done = subprocess.run(
        host.command(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "--ds=tools.cluster.settings_pgbouncer",
                "--reuse-db",
                *deselect,
                *files,
            ]
        ),
        env=app_env(cluster.pgbouncer_url(host)),
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert " passed" in done.stdout


def test_a_failover_keeps_the_contract(cluster: object) -> None:
    """kill -9 of the leader node under contention, synchronous mode: calls
    during the failover raise, none is a false "not acquired", no two holders
    overlap, tokens keep increasing and a lock granted before it survives
    (the history checked by the torture run's checker)."""
    from tools.cluster.cluster import Cluster
    from tools.cluster.failover import format_outcome, run_failovers

    assert isinstance(cluster, Cluster)
    with tempfile.TemporaryDirectory(prefix="dlock-failover.") as work:
        outcome = run_failovers(cluster, ["crash"], 1, Path(work), synchronous=True)
    sys.stdout.write(format_outcome(outcome) + "\n")
    [failover] = outcome.failovers
    assert failover.new_leader != failover.old_leader
    assert failover.sentinel_kept
    assert outcome.violations == []
    assert outcome.errors > 0  # the failover was seen, and it raised
    assert failover.unavailable < 60


def test_lock_reads_go_to_the_primary_and_a_replica_fails_the_check(cluster: object) -> None:
    """A router sends reads to a replica whose replay is paused (it lags):
    active(), GET, the list and the admin still see the lock just taken."""
    from tools.cluster.apps import REPOSITORY, app_env
    from tools.cluster.cluster import Cluster
    from tools.cluster.processes import wait_for

    assert isinstance(cluster, Cluster)
    assert wait_for(cluster.healthy, 180)
    replica = next(
        cluster.node(member["name"]) for member in cluster.members() if member["role"] != "leader"
    )
    env = {
        **app_env(cluster.pgbouncer_url()),
        "DLOCK_REPLICA_URL": cluster.node_url(replica),
        "DJANGO_SETTINGS_MODULE": "tools.cluster.settings_replica",
    }
    with cluster.maintenance():  # Patroni would resume the paused replay
        done = subprocess.run(
            [sys.executable, "-m", "tools.cluster.replica_check"],
            env=env,
            cwd=REPOSITORY,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    assert done.returncode == 0, done.stderr[-4000:]
    found = json.loads(done.stdout)
    assert found["replay"] == "paused"
    assert found["acquired"] is True
    assert found["replica_has_it"] is False  # the replica lags for sure...
    assert found["plain_read_alias"] == "default"  # ...and lock reads do not go there
    assert found["active_has_it"] is True
    assert found["api_get"] == 200
    assert found["api_list_has_it"] is True
    assert found["admin_status"] == 200 and found["admin_has_it"] is True
    assert found["other_acquirer_refused"] is True
    assert found["renewed"] is True
    assert found["released"] == "released"
    assert found["checks"] == {
        "default": [],
        "replica": ["django_dlock.E401", "django_dlock.E402"],
        "replica_unmarked": ["django_dlock.E402"],
    }


def test_an_app_host_reaches_the_cluster_only_through_its_link(cluster: object) -> None:
    from tools.cluster.cluster import Cluster
    from tools.cluster.netns import set_link
    from tools.cluster.processes import wait_for

    assert isinstance(cluster, Cluster)
    host = cluster.hosts[1]
    connect = host.command(
        [
            sys.executable,
            "-c",
            "import psycopg, sys; psycopg.connect(sys.argv[1], connect_timeout=2).close()",
            cluster.pgbouncer_url(host),
        ]
    )

    def reaches() -> bool:
        return subprocess.run(connect, capture_output=True, timeout=30, check=False).returncode == 0

    assert reaches()
    set_link(host, up=False)
    try:
        assert not reaches()
    finally:
        set_link(host, up=True)
    assert wait_for(reaches, 30)  # the route comes back with the link
