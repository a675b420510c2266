"""The cluster: etcd, three Patroni-managed PostgreSQL nodes, HAProxy to the
leader, PgBouncer in front, app hosts in namespaces. Its state (ports, PIDs)
lives in ``state.json`` in its directory, so that ``scripts/cluster.sh``
can stop it from another process."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tools.cluster import configs, netns, processes
from tools.cluster.configs import Node
from tools.cluster.packages import ClusterSetupError, command_path, ensure_packages

NODE_COUNT = 3
STATE_FILE = "state.json"


@dataclass
class Cluster:
    directory: Path
    synchronous: bool = True
    fsync: bool = False
    etcd_port: int = 0
    etcd_peer_port: int = 0
    primary_port: int = 0  # HAProxy to the leader
    replica_port: int = 0  # HAProxy to the replicas
    pgbouncer_port: int = 0
    nodes: list[Node] = field(default_factory=list)
    hosts: list[netns.AppHost] = field(default_factory=list)
    pids: dict[str, int] = field(default_factory=dict)  # server name -> PID

    # -- life cycle ------------------------------------------------------------

    @classmethod
    def up(
        cls,
        directory: Path | None = None,
        *,
        app_hosts: int = 4,
        synchronous: bool = True,
        fsync: bool = False,
    ) -> Cluster:
        """Start everything and wait until the leader takes writes through
        PgBouncer. On failure, stops what it started and raises."""
        ensure_packages()
        directory = directory or Path(tempfile.mkdtemp(prefix="dlock-cluster."))
        directory.mkdir(parents=True, exist_ok=True)
        cluster = cls(directory=directory, synchronous=synchronous, fsync=fsync)
        try:
            cluster._start(app_hosts)
        except BaseException:
            cluster.down(keep_logs=True)
            raise
        return cluster

    def _start(self, app_hosts: int) -> None:
        ports = iter(processes.free_ports(6 + 3 * NODE_COUNT))
        self.etcd_port, self.etcd_peer_port = next(ports), next(ports)
        self.primary_port, self.replica_port = next(ports), next(ports)
        self.pgbouncer_port = next(ports)
        self.nodes = [
            Node(
                f"node{i}",
                next(ports),
                next(ports),
                next(ports),
                self.directory / f"node{i}",
            )
            for i in range(1, NODE_COUNT + 1)
        ]
        slot = netns.free_slot()
        self.hosts = netns.create_hosts(f"dlk{slot}-", app_hosts, slot)
        self.save()
        for node in self.nodes:
            node.directory.mkdir()
            node.config_file.write_text(configs.patroni_config(node, self.synchronous, self.fsync))
        bootstrap = self.directory / "post_bootstrap.sh"
        bootstrap.write_text(configs.post_bootstrap_script())
        bootstrap.chmod(0o755)
        processes.chown_to_service_user(self.directory)
        self._start_server(
            "etcd",
            [_command("etcd"), *configs.etcd_args(self.directory / "etcd", *self._etcd_ports)],
        )
        self._wait("etcd", lambda: processes.port_open("127.0.0.1", self.etcd_port), 30)
        for node in self.nodes:
            self._start_proxy(node)
        self.start_node(self.nodes[0])
        self._wait("the first leader", lambda: self.leader() is not None, 90)
        for node in self.nodes[1:]:
            self.start_node(node)
        self._start_server("haproxy", [_command("haproxy"), "-db", "-f", self._haproxy_file()])
        self._start_server("pgbouncer", [_command("pgbouncer"), self._pgbouncer_file()])
        self._wait("a healthy cluster", self.healthy, 120)
        self._wait("writes through PgBouncer", self.writable, 60)

    @property
    def _etcd_ports(self) -> tuple[int, int]:
        return self.etcd_port, self.etcd_peer_port

    def _haproxy_file(self) -> str:
        path = self.directory / "haproxy.cfg"
        path.write_text(configs.haproxy_config(self.primary_port, self.replica_port, self.nodes))
        return str(path)

    def _pgbouncer_file(self) -> str:
        (self.directory / "userlist.txt").write_text('"postgres" ""\n')
        listen = ["127.0.0.1", *(host.host_address for host in self.hosts)]
        path = self.directory / "pgbouncer.ini"
        path.write_text(
            configs.pgbouncer_config(self.pgbouncer_port, listen, self.primary_port, self.directory)
        )
        return str(path)

    def _start_server(self, name: str, args: list[str], *, as_service_user: bool = True) -> None:
        self.pids[name] = processes.start(
            args, self.directory / f"{name}.log", as_service_user=as_service_user
        )
        self.save()

    def _start_proxy(self, node: Node) -> None:
        self._start_server(
            f"{node.name}-etcd-proxy",
            [
                sys.executable,
                str(Path(__file__).with_name("tcpproxy.py")),
                str(node.etcd_proxy_port),
                str(self.etcd_port),
            ],
            as_service_user=False,
        )
        self._wait(
            "the etcd proxy", lambda: processes.port_open("127.0.0.1", node.etcd_proxy_port), 10
        )

    def start_node(self, node: Node) -> None:
        """Start (or restart) the node's Patroni, which starts its PostgreSQL."""
        self._start_server(node.name, [_command("patroni"), str(node.config_file)])

    def down(self, *, keep_logs: bool = False) -> None:
        """Stop every server by its PID, delete the namespaces and the files
        (but the logs, with ``keep_logs``)."""
        for node in self.nodes:
            self.stop_postgres_if_orphaned(node)
        for name in sorted(self.pids, key=_stop_order):
            processes.stop(self.pids[name])
        for node in self.nodes:
            self.stop_postgres_if_orphaned(node)
        netns.delete_hosts(self.hosts)
        self.pids.clear()
        self.hosts = []
        if keep_logs:
            (self.directory / STATE_FILE).unlink(missing_ok=True)
        else:
            shutil.rmtree(self.directory, ignore_errors=True)

    def stop_postgres_if_orphaned(self, node: Node) -> None:
        """A PostgreSQL whose Patroni was killed keeps running: stop it."""
        pid = self.postmaster_pid(node)
        patroni = self.pids.get(node.name)
        if pid is not None and patroni is not None and not processes.alive(patroni):
            processes.stop(pid, sig=signal.SIGQUIT)

    # -- state -----------------------------------------------------------------

    def save(self) -> None:
        state = asdict(self)
        state["directory"] = str(self.directory)
        (self.directory / STATE_FILE).write_text(json.dumps(state, default=str, indent=2))

    @classmethod
    def load(cls, directory: Path) -> Cluster:
        state = json.loads((directory / STATE_FILE).read_text())
        state["directory"] = Path(state["directory"])
        state["nodes"] = [Node(**{**n, "directory": Path(n["directory"])}) for n in state["nodes"]]
        state["hosts"] = [netns.AppHost(**h) for h in state["hosts"]]
        return cls(**state)

    # -- what the cluster looks like ------------------------------------------

    def members(self) -> list[dict[str, Any]]:
        """Patroni's view of the cluster (name, role, state, lag), from the
        first node whose REST API answers."""
        for node in self.nodes:
            try:
                answer = _rest(node, "GET", "/cluster")
            except OSError:
                continue
            return list(answer.get("members", []))
        return []

    def leader(self) -> Node | None:
        for member in self.members():
            if member.get("role") == "leader" and member.get("state") == "running":
                return self.node(member["name"])
        return None

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    def healthy(self) -> bool:
        """A running leader, every other node streaming, and a synchronous
        standby when synchronous mode is on."""
        members = self.members()
        if len(members) != len(self.nodes):
            return False
        roles = [m.get("role") for m in members]
        if roles.count("leader") != 1 or any(
            m.get("state") not in ("running", "streaming") for m in members
        ):
            return False
        if any(m.get("role") != "leader" and m.get("lag") not in (0, "0") for m in members):
            return False
        return not self.synchronous or "sync_standby" in roles

    def writable(self) -> bool:
        import psycopg

        try:
            with psycopg.connect(self.pgbouncer_url(), autocommit=True, connect_timeout=2) as conn:
                row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
        except psycopg.Error:
            return False
        return row is not None and row[0] is False

    def postmaster_pid(self, node: Node) -> int | None:
        try:
            return int((node.data_dir / "postmaster.pid").read_text().split()[0])
        except (FileNotFoundError, ValueError, IndexError):
            return None

    # -- addresses -------------------------------------------------------------

    def pgbouncer_url(
        self, host: netns.AppHost | None = None, database: str = configs.DATABASE
    ) -> str:
        address = host.host_address if host else "127.0.0.1"
        return f"postgres://postgres@{address}:{self.pgbouncer_port}/{database}"

    def primary_url(self, database: str = configs.DATABASE) -> str:
        """Directly to the leader through HAProxy, bypassing the pooler."""
        return f"postgres://postgres@127.0.0.1:{self.primary_port}/{database}"

    def replica_url(self, database: str = configs.DATABASE) -> str:
        return f"postgres://postgres@127.0.0.1:{self.replica_port}/{database}"

    def node_url(self, node: Node, database: str = configs.DATABASE) -> str:
        return f"postgres://postgres@127.0.0.1:{node.pg_port}/{database}"

    # -- changes ---------------------------------------------------------------

    def set_synchronous(self, synchronous: bool) -> None:
        """Switch Patroni's synchronous_mode at run time (dynamic configuration)."""
        leader = self.leader()
        if leader is None:
            raise ClusterSetupError("no leader to reconfigure")
        _rest(leader, "PATCH", "/config", {"synchronous_mode": synchronous})
        self.synchronous = synchronous
        self.save()
        self._wait("the new synchronous_mode", self.healthy, 60)

    @contextlib.contextmanager
    def maintenance(self) -> Iterator[None]:
        """Patroni's maintenance mode: it leaves PostgreSQL alone (for one, it
        would otherwise resume a replica's paused WAL replay within a loop)."""
        leader = self.leader()
        if leader is None:
            raise ClusterSetupError("no leader to reconfigure")
        _rest(leader, "PATCH", "/config", {"pause": True})
        self._wait("maintenance mode", lambda: self._paused() is True, 30)
        time.sleep(2 * configs.DCS_TIMING["loop_wait"])  # a loop begun before it ends
        try:
            yield
        finally:
            _rest(leader, "PATCH", "/config", {"pause": None})
            self._wait("the end of maintenance mode", lambda: self._paused() is False, 30)

    def _paused(self) -> bool | None:
        for node in self.nodes:
            try:
                return bool(_rest(node, "GET", "/cluster").get("pause", False))
            except OSError:
                continue
        return None

    def _wait(self, what: str, condition: Any, timeout: float) -> None:
        if not processes.wait_for(condition, timeout, interval=0.2):
            raise ClusterSetupError(
                f"timed out after {timeout} s waiting for {what}; logs in {self.directory}"
            )


def _command(name: str) -> str:
    path = command_path(name)
    if path is None:
        raise ClusterSetupError(f"{name} is not installed")
    return path


def _stop_order(name: str) -> int:
    """Clients before servers: PgBouncer, HAProxy, Patroni nodes, proxies, etcd."""
    if name.endswith("-etcd-proxy"):
        return 3
    return {"pgbouncer": 0, "haproxy": 1, "etcd": 4}.get(name, 2)


def _rest(node: Node, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        f"http://127.0.0.1:{node.rest_port}{path}",
        data=data,
        method=method,
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=2) as answer:  # noqa: S310 - loopback
            return json.loads(answer.read() or b"{}")
    except urllib.error.HTTPError as error:
        return json.loads(error.read() or b"{}")


def default_directory() -> Path:
    """Where ``scripts/cluster.sh`` keeps its one cluster."""
    return Path(os.environ.get("DLOCK_CLUSTER_DIR", "/tmp/dlock-cluster"))
