"""The SQLite listener: every process of a SQLite database runs on its host, so
a release wakes the head of the queue with a datagram to the Unix socket of the
head's process, in Linux's abstract namespace (no file to create or clean up),
named by the listener's channel. The datagram carries the head's ticket and is
sent after the release commits; one that finds no socket (the process is gone)
is dropped.
"""

from __future__ import annotations

import os
import select
import socket

from django_dlock.backends.sqlite import host_address
from django_dlock.locking.listener import IDLE_TICK, Listener

# A ticket, in decimal digits: the largest datagram worth reading.
DATAGRAM_SIZE = 64


class HostListener(Listener[socket.socket]):
    """Receives the releases' datagrams on the process's abstract Unix socket."""

    def _connect(self) -> socket.socket:
        receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            receiver.bind(host_address(self.channel))
        except OSError:
            receiver.close()
            raise
        receiver.setblocking(False)
        self.connects += 1
        return receiver

    def _subscribe(self, connection: socket.socket) -> None:
        pass  # bound to its address, it receives

    def _receive(self, connection: socket.socket) -> None:
        receiver = connection.fileno()
        ready, _, _ = select.select([receiver, self._wake_read], [], [], IDLE_TICK)
        if self._wake_read in ready:
            os.read(self._wake_read, 4096)
        if receiver in ready:
            while True:
                try:
                    datagram = connection.recv(DATAGRAM_SIZE)
                except BlockingIOError:
                    return
                self._dispatch(datagram.decode(errors="replace"))

    def _close(self, connection: socket.socket) -> None:
        connection.close()
