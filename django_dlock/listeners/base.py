"""The listener: one per process and database alias, on a thread of its own,
that receives the releases its waiters wait for.

A waiter queues with the listener's channel in its ticket's row. A release of a
resource that has waiters sends its ticket to the channel of the head of its
queue, and the listener wakes that waiter alone. Only the head's process hears
it (with a channel per resource, every process waiting on the resource would
wake for each release, to find the ticket not its own). How it travels:

- PostgreSQL: ``LISTEN``/``NOTIFY`` (``listeners.postgresql``);
- SQLite, whose processes all run on one host: a datagram to a Unix socket
  named by the channel (``listeners.sqlite``).

The listener starts when the first waiter needs it, reconnects when its
connection breaks (waiters poll meanwhile, and all of them look once it is
back, since wake-ups may have been missed), and stops once no waiter has needed
it for ``LINGER`` seconds, or at exit.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from django_dlock.rules.notice import GrantNotice, read_payload

if TYPE_CHECKING:
    from django_dlock.locking.wakeup import Wakeup

logger = logging.getLogger("django_dlock")

# Seconds the connection and its thread stay after the last waiter left: a
# process that takes turns on a lock need not reconnect and LISTEN for each turn.
LINGER = 5.0
# The longest pause between two attempts to reconnect, in seconds.
RECONNECT_MAX = 2.0
# How often the thread looks at its state when nothing happens, in seconds.
IDLE_TICK = 1.0


_C = TypeVar("_C")  # a listener's connection: what its thread receives on


class Watch:
    """One waiter's subscription to the releases that name its ticket; or an
    observer's (``overhears``) to every wake-up sent to another process's
    channel, where the database lets several listen on one (``shares_channels``)."""

    def __init__(self, listener: Listener[Any], wakeup: Wakeup, *, observer: bool = False) -> None:
        self.listener = listener
        self.channel = listener.channel
        self.wakeup = wakeup
        self.ticket: int | None = None
        # The grant a wake-up carried (``rules.notice``), with the ticket it
        # named: a grant for a ticket the waiter has since left is not its own.
        self.notice: tuple[int, GrantNotice] | None = None
        self.observer = observer  # never has a ticket
        self.overhears = ""  # the other process's channel an observer listens to

    def overhear(self, channel: str, timeout: float) -> bool:
        """Listen to ``channel`` ("" to none) instead of the one before: whether
        a wake-up sent there now reaches this watch, waiting up to ``timeout``
        seconds for the listener to get there."""
        return self.listener._overhear(self, channel, timeout)

    def listening(self, timeout: float = 0.0) -> bool:
        """Whether a release now reaches this waiter; waits up to ``timeout``
        seconds for the listener to get there (connecting, ``LISTEN``)."""
        return self.listener._wait_listening(timeout)

    def claim(self, ticket: int) -> None:
        """Name the waiter's ticket: the payload that wakes it."""
        self.listener._claim(self, ticket)

    def take_notice(self, ticket: int) -> GrantNotice | None:
        """The grant the wake-up naming ``ticket`` carried, once; None without one."""
        return self.listener._take_notice(self, ticket)

    def close(self) -> None:
        self.listener._unwatch(self)


class Listener(Generic[_C]):
    """The listening connection of one database alias in this process: the
    waiters' side and the thread. What the thread listens on, a subclass says
    (``_connect``, ``_subscribe``, ``_receive``, ``_close``)."""

    def __init__(self, using: str) -> None:
        self.using = using
        # Random, not the process id: a channel outlives its process in the
        # rows of waiters that crashed, and process ids come round again.
        self.channel = f"dlock_{secrets.token_hex(12)}"
        self.usable = True  # False once a pooler was found in between
        self._lock = threading.Condition()
        self._watches: list[Watch] = []
        self._last_used = 0.0  # when the last waiter left
        self._listening = False  # the live connection receives on the channel
        # Tickets woken before their claim, with the grant their wake-up carried.
        self._unclaimed: dict[int, GrantNotice | None] = {}
        self._overheard: set[str] = set()  # other processes' channels listened to
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._wake_read, self._wake_write = os.pipe()
        self.connects = 0  # how many times it connected (for tests and benchmarks)
        # The process id, on the database server, of the listening connection,
        # where the server can tell whether it lives (see ``LockWaiter.listener_pid``).
        self.backend_pid: int | None = None

    #: Whether a process may listen to another's channel (``LISTEN``): a
    #: leader's observer hears the releases that wake the head of the queue.
    shares_channels = False

    # -- the waiters' side ---------------------------------------------------------

    def watch(self, wakeup: Wakeup, *, observer: bool = False) -> Watch:
        """Subscribe a waiter (or, ``observer``, one that ``overhear``s others)."""
        watch = Watch(self, wakeup, observer=observer)
        with self._lock:
            self._watches.append(watch)
            self._start()
        return watch

    def _claim(self, watch: Watch, ticket: int) -> None:
        with self._lock:
            watch.ticket, watch.notice = ticket, None
            if ticket in self._unclaimed:
                notice = self._unclaimed.pop(ticket)
                watch.notice = None if notice is None else (ticket, notice)
                watch.wakeup.set(as_head=True)

    def _take_notice(self, watch: Watch, ticket: int) -> GrantNotice | None:
        with self._lock:
            told, watch.notice = watch.notice, None
            return told[1] if told is not None and told[0] == ticket else None

    def _overhear(self, watch: Watch, channel: str, timeout: float) -> bool:
        with self._lock:
            if channel != watch.overhears:
                watch.overhears = channel
                self._poke()  # the thread listens to the channels overheard now
            if not channel:
                return False
            return self._lock.wait_for(
                lambda: not self.usable or (self._listening and channel in self._heard()),
                timeout,
            ) and bool(self.usable and channel and self._listening)

    def only_observers(self) -> bool:
        """Whether every watch is an observer's: none of them has a ticket."""
        with self._lock:
            return bool(self._watches) and all(watch.observer for watch in self._watches)

    def _heard(self) -> set[str]:
        """(With ``_lock`` held.) The channels the live connection listens to."""
        return {self.channel, *self._overheard}

    def _overhearing(self, listen: Callable[[set[str], set[str]], None]) -> None:
        """(The thread.) Listen to the channels the observers want to hear now
        and to no other: ``listen(new, gone)`` does it on the connection."""
        with self._lock:
            wanted = {watch.overhears for watch in self._watches if watch.overhears}
            wanted.discard(self.channel)  # listened to already, for this process's waiters
            heard = set(self._overheard)
        if wanted == heard:
            return
        listen(wanted - heard, heard - wanted)
        with self._lock:
            self._overheard = wanted
            self._lock.notify_all()

    def _unwatch(self, watch: Watch) -> None:
        with self._lock:
            if watch in self._watches:
                self._watches.remove(watch)
            if not self._watches:
                self._unclaimed.clear()
                self._last_used = time.monotonic()

    def _wait_listening(self, timeout: float) -> bool:
        with self._lock:
            return self._lock.wait_for(lambda: not self.usable or self._listening, timeout) and (
                self.usable and self._listening
            )

    def _poke(self) -> None:
        with contextlib.suppress(OSError):
            os.write(self._wake_write, b"\0")

    def _start(self) -> None:
        """Start the thread if it is not running (with ``_lock`` held)."""
        if self._thread is None and self.usable and not self._stopping:
            self._thread = threading.Thread(
                target=self._run, name=f"django-dlock listener {self.using}", daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        """Close the connection and end the thread (at exit, or after tests)."""
        with self._lock:
            self._stopping = True
            thread = self._thread
        self._poke()
        if thread is not None and thread is not threading.current_thread():
            thread.join(10)
        with self._lock:
            self._stopping = False

    # -- the thread ----------------------------------------------------------------

    def _run(self) -> None:
        connection: _C | None = None
        delay = 0.05
        try:
            while not self._done():
                try:
                    if connection is None:
                        connection = self._connect()
                        if connection is None:
                            return  # nothing to listen on (a pooler)
                        self._subscribe(connection)
                        with self._lock:
                            self._listening = True
                            self._lock.notify_all()
                        delay = 0.05
                    self._receive(connection)
                except Exception as error:
                    # (The driver's errors, and OSError from a socket gone bad.)
                    logger.warning("django-dlock listener on %r: %s", self.using, error)
                    self._lost(connection)
                    connection = None
                    with self._lock:
                        self._lock.wait_for(lambda: self._stopping, delay)
                    delay = min(delay * 2, RECONNECT_MAX)
        finally:
            self._lost(connection)

    def _done(self) -> bool:
        """Whether the thread should end: stopping, or idle past the linger.

        An ending thread stops counting as listening here, in the same hold of
        the lock that lets ``watch()`` start its successor: a waiter that comes
        meanwhile waits for the successor's ``LISTEN`` rather than queue with a
        channel that the closing connection no longer hears (or with its
        server process, which is about to end, as its ticket's listener)."""
        with self._lock:
            idle = not self._watches and time.monotonic() - self._last_used > LINGER
            if self._stopping or idle:
                self._thread = None
                self._not_listening()
                return True
            return False

    def _dispatch(self, payload: str, channel: str = "") -> None:
        if channel:
            with self._lock:
                for watch in self._watches:
                    if watch.overhears == channel:
                        watch.wakeup.set()
            if channel != self.channel:
                return
        try:
            ticket, notice = read_payload(payload)
        except (ValueError, IndexError):
            return
        with self._lock:
            for watch in self._watches:
                if watch.ticket == ticket:
                    if notice is not None:  # a later plain wake-up keeps the grant
                        watch.notice = (ticket, notice)
                    watch.wakeup.set(as_head=True)
                    return
            if any(watch.ticket is None and not watch.observer for watch in self._watches):
                # A waiter between queuing and claiming its ticket: keep it.
                self._unclaimed[ticket] = notice

    def _lost(self, connection: _C | None) -> None:
        """The connection is gone: waiters poll, and all look once (a release may
        have been missed while it was down). A thread that ended (``_done``)
        may have a successor already, listening: its state is not this one's."""
        if connection is not None:
            with contextlib.suppress(Exception):
                self._close(connection)
        with self._lock:
            if self._thread is None or self._thread is threading.current_thread():
                self._not_listening()

    def _not_listening(self) -> None:
        """(With ``_lock`` held.) Nothing listens: waiters poll, and all look once."""
        self._listening = False
        self._overheard = set()
        self.backend_pid = None
        self._lock.notify_all()
        self._wake_all()

    def _wake_all(self) -> None:
        for watch in self._watches:
            watch.wakeup.set()

    # -- what the thread listens on (a subclass's) -----------------------------------

    def _connect(self) -> _C | None:
        """A new connection, or None where there is nothing to listen on."""
        raise NotImplementedError

    def _subscribe(self, connection: _C) -> None:
        """Start receiving on the process's channel."""
        raise NotImplementedError

    def _receive(self, connection: _C) -> None:
        """Wait up to ``IDLE_TICK`` for wake-ups (or a poke); hand them out."""
        raise NotImplementedError

    def _close(self, connection: _C) -> None:
        raise NotImplementedError
