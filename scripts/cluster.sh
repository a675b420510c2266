#!/usr/bin/env bash
# A Patroni cluster on this machine: etcd, three PostgreSQL 15 nodes (synchronous
# mode), HAProxy to the leader, PgBouncer (transaction pooling), app hosts in
# network namespaces. Needs root; installs the Debian packages patroni,
# etcd-server, etcd-client, haproxy and pgbouncer (apt-get) when missing.
#
#   scripts/cluster.sh up [--async] [--app-hosts N]   start one, print its addresses
#   scripts/cluster.sh status | down                  show it | stop it (by PID)
#   scripts/cluster.sh test      the short run: PgBouncer scenario (core) and one failover
#   scripts/cluster.sh full      everything: the whole PgBouncer scenario, the replica
#                                check, 10 failovers per fault in synchronous mode and
#                                asynchronous mode, and the capacity table and chart
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-$(command -v python || command -v python3)}

case "${1:-}" in
up | down | status)
    exec "$PYTHON" -m tools.cluster "$@"
    ;;
test)
    shift
    DLOCK_CLUSTER=1 exec "$PYTHON" -m pytest -p no:randomly tests/test_cluster.py "$@"
    ;;
full)
    DLOCK_CLUSTER=1 DLOCK_CLUSTER_FULL=1 "$PYTHON" -m pytest -p no:randomly tests/test_cluster.py
    "$PYTHON" -m tools.cluster.failover --runs 10 --modes sync,async
    "$PYTHON" -m pip install --quiet matplotlib  # for the chart only
    "$PYTHON" -m tools.cluster.capacity --clients 8,32,64 --chart docs/capacity.png
    ;;
*)
    echo "usage: scripts/cluster.sh up|down|status|test|full" >&2
    exit 2
    ;;
esac
