"""The configuration files of the cluster's servers."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

PG_BIN = Path("/usr/lib/postgresql/15/bin")
SCOPE = "dlock"
DATABASE = "dlock"  # the database the apps use; created on bootstrap

# Patroni's timing: a leader that cannot renew its key demotes itself within
# loop_wait + 2 * retry_timeout, before the key (ttl) expires and a replica
# takes over. Short, so that a failover takes seconds.
DCS_TIMING = {"ttl": 6, "loop_wait": 1, "retry_timeout": 2}


@dataclass(frozen=True)
class Node:
    name: str
    pg_port: int
    rest_port: int
    etcd_proxy_port: int  # the node reaches etcd only through its own cuttable proxy
    directory: Path

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    @property
    def config_file(self) -> Path:
        return self.directory / "patroni.yml"


def patroni_config(node: Node, synchronous: bool, fsync: bool) -> str:
    """YAML (written as JSON, which YAML reads) for one Patroni node."""
    trust = ["local all all trust", "host all all 127.0.0.1/32 trust"]
    config = {
        "scope": SCOPE,
        "name": node.name,
        "log": {"level": "WARNING"},
        "restapi": {
            "listen": f"127.0.0.1:{node.rest_port}",
            "connect_address": f"127.0.0.1:{node.rest_port}",
        },
        # use_proxies: only this address, never the members etcd advertises
        # (which would bypass the node's proxy).
        "etcd3": {
            "hosts": [f"127.0.0.1:{node.etcd_proxy_port}"],
            "protocol": "http",
            "use_proxies": True,
        },
        "bootstrap": {
            "dcs": {
                **DCS_TIMING,
                "maximum_lag_on_failover": 1048576,
                "synchronous_mode": synchronous,
                "postgresql": {
                    "use_pg_rewind": True,
                    "remove_data_directory_on_rewind_failure": True,
                    "remove_data_directory_on_diverged_timelines": True,
                    "parameters": {
                        "wal_log_hints": "on",
                        "max_connections": 300,
                        "max_wal_senders": 10,
                        "max_replication_slots": 10,
                        "hot_standby": "on",
                        # The server's zone is UTC, so Django never needs a
                        # session SET TIME ZONE (a pooler would not keep it).
                        "timezone": "UTC",
                    },
                },
            },
            "initdb": [{"encoding": "UTF8"}, {"locale": "C.UTF-8"}],
            "post_bootstrap": str(node.directory.parent / "post_bootstrap.sh"),
        },
        "postgresql": {
            "listen": f"127.0.0.1:{node.pg_port}",
            "connect_address": f"127.0.0.1:{node.pg_port}",
            "data_dir": str(node.data_dir),
            "bin_dir": str(PG_BIN),
            "pgpass": str(node.directory / "pgpass"),
            # A fast checkpoint: otherwise a new replica waits minutes for a spread one.
            "basebackup": [{"checkpoint": "fast"}],
            "authentication": {
                "superuser": {"username": "postgres", "password": "postgres"},
                "replication": {"username": "replicator", "password": "replicator"},
            },
            "parameters": {
                "unix_socket_directories": str(node.directory),
                "fsync": "on" if fsync else "off",
            },
            "pg_hba": [*trust, "host replication all 127.0.0.1/32 trust"],
        },
        "tags": {"nofailover": False, "noloadbalance": False},
    }
    return json.dumps(config, indent=2)


def post_bootstrap_script() -> str:
    """Run by Patroni once, on the first leader: creates the apps' database."""
    return (
        f'#!/bin/sh\nexec {PG_BIN}/psql "$1" -v ON_ERROR_STOP=1 -c "CREATE DATABASE {DATABASE}"\n'
    )


def haproxy_config(primary_port: int, replica_port: int, nodes: list[Node]) -> str:
    """HAProxy sends the primary port to the node whose Patroni answers 200 on
    /primary, the replica port to the replicas; on a change it cuts the old
    node's sessions, so no client keeps talking to a demoted leader."""
    lines = [
        "global",
        "    maxconn 2000",
        "defaults",
        "    mode tcp",
        "    timeout connect 2s",
        "    timeout client 30m",
        "    timeout server 30m",
        "    timeout check 1s",
    ]
    for name, port, check in (
        ("primary", primary_port, "/primary"),
        ("replicas", replica_port, "/replica"),
    ):
        lines += [
            f"listen {name}",
            f"    bind 127.0.0.1:{port}",
            f"    option httpchk OPTIONS {check}",
            "    http-check expect status 200",
            "    default-server inter 300ms fall 2 rise 1 on-marked-down shutdown-sessions",
        ]
        lines += [
            f"    server {n.name} 127.0.0.1:{n.pg_port} maxconn 300 check port {n.rest_port}"
            for n in nodes
        ]
    return "\n".join(lines) + "\n"


def pgbouncer_config(port: int, listen: list[str], upstream_port: int, directory: Path) -> str:
    """PgBouncer in transaction pooling in front of HAProxy's primary port."""
    return "\n".join(
        [
            "[databases]",
            f"* = host=127.0.0.1 port={upstream_port}",
            "[pgbouncer]",
            f"listen_addr = {','.join(listen)}",
            f"listen_port = {port}",
            "unix_socket_dir =",
            "auth_type = trust",
            f"auth_file = {directory / 'userlist.txt'}",
            "admin_users = postgres",
            "pool_mode = transaction",
            "max_client_conn = 1000",
            "default_pool_size = 20",
            "max_db_connections = 60",
            # After a failed login (the old leader gone), retry after 1 s, not 15.
            "server_login_retry = 1",
            "server_connect_timeout = 3",
            "query_wait_timeout = 30",
            "ignore_startup_parameters = extra_float_digits,options",
            "",
        ]
    )


def etcd_args(data_dir: Path, client_port: int, peer_port: int) -> list[str]:
    peer = f"http://127.0.0.1:{peer_port}"
    client = f"http://127.0.0.1:{client_port}"
    return [
        "--name=etcd1",
        f"--data-dir={data_dir}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=etcd1={peer}",
        "--initial-cluster-state=new",
        "--log-level=warn",
    ]
