"""A TCP proxy on loopback that can be cut, to partition a node from etcd.

    python -m tools.cluster.tcpproxy LISTEN_PORT TARGET_PORT

SIGUSR1 cuts the link: open connections are dropped and new ones are accepted
but never answered (as across a dead network, the client times out).
SIGUSR2 restores it. SIGTERM stops the proxy.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import sys
import threading
from types import FrameType

HOST = "127.0.0.1"


class Proxy:
    def __init__(self, listen_port: int, target_port: int) -> None:
        self.target_port = target_port
        self.listener = socket.create_server((HOST, listen_port), reuse_port=False)
        self.cut = threading.Event()
        self.lock = threading.Lock()
        self.open: set[socket.socket] = set()
        self.held: list[socket.socket] = []

    def serve(self) -> None:
        while True:
            client, _ = self.listener.accept()
            if self.cut.is_set():
                self.held.append(client)  # never answered: the client times out
                continue
            try:
                server = socket.create_connection((HOST, self.target_port), timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            with self.lock:
                self.open.update((client, server))
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                if self.cut.is_set():
                    break
                sink.sendall(data)
        except OSError:
            pass
        for end in (source, sink):
            self._close(end)

    def _close(self, end: socket.socket) -> None:
        with self.lock:
            self.open.discard(end)
        with contextlib.suppress(OSError):
            end.shutdown(socket.SHUT_RDWR)
        end.close()

    def set_cut(self, cut: bool) -> None:
        if cut:
            self.cut.set()
            with self.lock:
                ends = list(self.open)
            for end in ends:
                self._close(end)
        else:
            for end in self.held:
                end.close()
            self.held.clear()
            self.cut.clear()


def main(argv: list[str]) -> None:
    proxy = Proxy(int(argv[0]), int(argv[1]))

    def on_signal(number: int, frame: FrameType | None) -> None:
        proxy.set_cut(number == signal.SIGUSR1)

    signal.signal(signal.SIGUSR1, on_signal)
    signal.signal(signal.SIGUSR2, on_signal)
    proxy.serve()


if __name__ == "__main__":
    main(sys.argv[1:])
