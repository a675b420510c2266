"""The wake-ups of SQLite's waiters, both ends: every process of a SQLite
database runs on its host, so a release wakes the head of the queue with a
datagram (``wake``) to the Unix socket of the head's process, in Linux's
abstract namespace (no file to create or clean up), named by the listener's
channel. The datagram carries the head's ticket and is sent after the release
commits; one that finds no socket (the process is gone) is dropped. The
``DatagramListener`` receives them.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket

from django_dlock.listeners.base import IDLE_TICK, Listener

# A ticket and the grant it may carry (``rules.notice``), in decimal digits:
# the largest datagram worth reading.
DATAGRAM_SIZE = 128


def host_address(channel: str) -> str:
    """The Unix socket (Linux's abstract namespace) of the listener whose
    channel is ``channel``."""
    return "\0" + channel


def alive(channel: str) -> bool:
    """Whether the listener of ``channel`` is there (its process lives): a
    datagram to a socket nobody has bound is refused at once. The probe's
    payload is no ticket, and the listener drops it."""
    with _sender() as sender:
        try:
            sender.sendto(b"?", host_address(channel))
        except (ConnectionRefusedError, FileNotFoundError):
            return False
        except OSError:  # a full buffer (a paused process), say: it is there
            return True
    return True


def wake(channel: str, ticket: int, payload: str = "") -> None:
    """Tell the listener of ``channel`` that ``ticket`` heads its queue and the
    lock is free (or, ``payload``, that the release granted it: ``rules.notice``).
    A listener that is gone (its process ended) is not there to
    tell: its waiter's ticket lapses, and the next waiter looks by itself."""
    with _sender() as sender, contextlib.suppress(OSError):
        sender.sendto((payload or str(ticket)).encode(), host_address(channel))


def _sender() -> socket.socket:
    """A socket to send one datagram, which never blocks: a paused process
    (SIGSTOP) stops reading its socket, and a send to its full buffer would
    wait as long as it stays paused, inside a release or a look."""
    sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sender.setblocking(False)
    return sender


class DatagramListener(Listener[socket.socket]):
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
