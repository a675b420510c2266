"""``python -m tools.cluster up|down|status`` (what ``scripts/cluster.sh`` runs)."""

from __future__ import annotations

import argparse
import json
import sys

from tools.cluster.apps import migrate
from tools.cluster.cluster import STATE_FILE, Cluster, default_directory
from tools.cluster.packages import ClusterSetupError
from tools.cluster.processes import say


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="scripts/cluster.sh")
    parser.add_argument("command", choices=["up", "down", "status"])
    parser.add_argument("--app-hosts", type=int, default=4, help="network namespaces (4)")
    parser.add_argument(
        "--async",
        dest="synchronous",
        action="store_false",
        help="start with Patroni's synchronous_mode off",
    )
    args = parser.parse_args(argv)
    directory = default_directory()
    running = (directory / STATE_FILE).exists()
    try:
        if args.command == "up":
            if running:
                say(f"cluster: already up in {directory} (scripts/cluster.sh down first)")
                return 1
            cluster = Cluster.up(directory, app_hosts=args.app_hosts, synchronous=args.synchronous)
            migrate(cluster)
            _print_addresses(cluster)
        elif args.command == "down":
            if not running:
                say(f"cluster: none running in {directory}")
                return 0
            Cluster.load(directory).down()
            say("cluster: stopped")
        else:
            if not running:
                say(f"cluster: none running in {directory}")
                return 1
            cluster = Cluster.load(directory)
            _print_addresses(cluster)
            say(json.dumps(cluster.members(), indent=2))
    except ClusterSetupError as error:
        say(f"cluster: {error}", error=True)
        return 1
    return 0


def _print_addresses(cluster: Cluster) -> None:
    leader = cluster.leader()
    say(
        f"cluster: directory {cluster.directory}, leader {leader.name if leader else 'none'}, "
        f"synchronous_mode {'on' if cluster.synchronous else 'off'}"
    )
    say(f"DATABASE_URL={cluster.pgbouncer_url()}  # PgBouncer, transaction pooling")
    say(f"DLOCK_PRIMARY_URL={cluster.primary_url()}  # HAProxy to the leader, no pooler")
    say(f"DLOCK_REPLICA_URL={cluster.replica_url()}  # HAProxy to the replicas")
    for host in cluster.hosts:
        say(
            f"app host {host.namespace}: ip netns exec {host.namespace} ... "
            f"DATABASE_URL={cluster.pgbouncer_url(host)}"
        )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
