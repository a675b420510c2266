"""App hosts: network namespaces joined to this machine by a veth pair each.

An app process in host ``i``'s namespace reaches the cluster only through its
own link, at that link's address on this machine's side (``host_address``);
taking the link down cuts that host off.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

SUBNET = "10.231"


@dataclass(frozen=True)
class AppHost:
    namespace: str
    link: str  # this machine's end of the veth pair
    host_address: str  # this machine's end: what the apps connect to
    app_address: str

    def command(self, args: list[str]) -> list[str]:
        """``args`` run inside this host's namespace."""
        return ["ip", "netns", "exec", self.namespace, *args]


def _ip(*args: str, namespace: str | None = None) -> None:
    prefix = ["ip", "netns", "exec", namespace] if namespace else []
    subprocess.run([*prefix, "ip", *args], check=True, capture_output=True, text=True)


def free_slot() -> int:
    """A third octet of 10.231.x.0/24 that no interface of this machine uses."""
    used = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True, check=True).stdout
    for slot in range(1, 255):
        if f" {SUBNET}.{slot}." not in used:
            return slot
    raise RuntimeError(f"no free {SUBNET}.x.0/24 for app hosts")


def create_hosts(prefix: str, count: int, slot: int) -> list[AppHost]:
    """``count`` namespaces named ``{prefix}{i}``, a /30 each in 10.231.slot.0/24."""
    hosts = []
    for index in range(count):
        base = 4 * index
        host = AppHost(
            namespace=f"{prefix}{index}",
            link=f"{prefix}{index}h",
            host_address=f"{SUBNET}.{slot}.{base + 1}",
            app_address=f"{SUBNET}.{slot}.{base + 2}",
        )
        inner = f"{prefix}{index}a"
        _ip("netns", "add", host.namespace)
        _ip("link", "add", host.link, "type", "veth", "peer", "name", inner)
        _ip("link", "set", inner, "netns", host.namespace)
        _ip("addr", "add", f"{host.host_address}/30", "dev", host.link)
        _ip("link", "set", host.link, "up")
        _ip("addr", "add", f"{host.app_address}/30", "dev", inner, namespace=host.namespace)
        _ip("link", "set", inner, "up", namespace=host.namespace)
        _ip("link", "set", "lo", "up", namespace=host.namespace)
        hosts.append(host)
    return hosts


def set_link(host: AppHost, up: bool) -> None:
    _ip("link", "set", host.link, "up" if up else "down")


def delete_hosts(hosts: list[AppHost]) -> None:
    for host in hosts:
        # Deleting one end of a veth pair deletes both.
        subprocess.run(["ip", "link", "del", host.link], capture_output=True, check=False)
        subprocess.run(["ip", "netns", "del", host.namespace], capture_output=True, check=False)
