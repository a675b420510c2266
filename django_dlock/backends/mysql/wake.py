"""MariaDB's wake-up: a release opens a named lock that the head of the queue
blocks on.

MariaDB has no ``NOTIFY``; what one session can wait for inside the server is
a lock that another session holds. So the holder of an exclusive lock also
holds a named lock of the resource, its *gate* (``GET_LOCK``, several per
session since MariaDB 10.0.2), taken in the statement that reads back what the
acquisition decided and given up in the one that reads back the release
(``one_row``; one statement more after a portable operation). The head of the
queue, having looked and found the lock held, blocks in ``GET_LOCK(gate)`` on
its own connection (``MySQLQueue.wait_for_release``), and gives the gate up in
the same statement once it gets it: the release lets it through at once, and
any other process that blocks there too after it, one after the other inside
the server. The woken waiter looks and takes the lock through the fair path:
the wake-up grants nothing. A waiter never keeps the gate past its statement,
so one that dies holds up nobody; the gate lives in its holder's session,
and MariaDB gives it up when that session ends (a holder that crashed).

The chain: an exclusive waiter that waits at a gate holds its own gate
meanwhile (the one its take would hold), and each waiter behind the head waits
at the gate of the live waiter just ahead of it (``MySQLQueue.owner_ahead``)
rather than polling. As the queue moves nobody has to move: the second in line
waits at the head's gate, which becomes the holder's gate once the head takes
the lock, so each release lets exactly the next waiter through, already
blocked there. A waiter that leaves without the lock gives its gate up
(``leave_gate``), one that dies loses it with its session: the waiter behind
wakes and looks. Where the gate tells nothing (nobody holds it: the holder
took the lock on another session than this one's, the waiter ahead has not
reached a gate yet, a reader), the waiter sleeps and looks as before.
Measurements, and the mechanisms not chosen: docs/databases.md.
"""

from __future__ import annotations

import functools
import hashlib

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.db.backends.base.base import BaseDatabaseWrapper

# The prefix of a resource's gate; MariaDB's lock names are at most 64 characters.
GATE = "dlock-wake:"
# How long a new holder waits for its gate (seconds): a waiter may hold it for
# the microseconds between getting it and giving it up.
GATE_WAIT = 0.001

# SQL: this session holds the gate (%s twice), taking it if need be; never twice
# (GET_LOCK counts a session's holds of one name, and one release must free it).
HOLD_GATE = f"IF(IS_USED_LOCK(%s) <=> CONNECTION_ID(), 1, GET_LOCK(%s, {GATE_WAIT}))"
# MariaDB's error where its deadlock detection refuses a wait (user locks too).
ER_LOCK_DEADLOCK = 1213
# SQL: this session holds the gate %(own)s unless another does (no wait), or
# nothing where it is NULL: a waiter's own gate, held while it waits (the chain).
HOLD_OWN_GATE = (
    "IF(%(own)s IS NULL, NULL, IF(IS_USED_LOCK(%(own)s) <=> CONNECTION_ID(), 1, "
    "GET_LOCK(%(own)s, 0)))"
)
# SQL: wait up to %(seconds)s for the gate's holder to give it up, and leave it
# free: 1 once it did, 0 while it stays held, -1 where another session does not
# hold it (nothing to wait for), NULL on an error (the wait killed).
WAIT_AT_GATE = (
    "SELECT CASE WHEN IS_USED_LOCK(%(gate)s) IS NULL "
    "OR IS_USED_LOCK(%(gate)s) = CONNECTION_ID() THEN -1 "
    "WHEN GET_LOCK(%(gate)s, %(seconds)s) = 1 THEN RELEASE_LOCK(%(gate)s) ELSE 0 END"
)


def gate_name(database: str, table: str, resource: str, owner: str) -> str:
    """The gate of ``owner``'s hold of ``resource``: named locks are the
    server's, so the name says which database's lock table it is of; and
    whose hold, so that a session that keeps the gate of a hold it lost (a
    paused holder whose lock expired and was taken over) holds up nobody's
    wait for the next holder. A hash, keyed with the project's
    ``SECRET_KEY``: any resource fits, and the owner, a secret, is not shown."""
    value = f"{database}\0{table}\0{resource}\0{owner}".encode()
    return GATE + hashlib.blake2b(value, key=_key(), digest_size=16).hexdigest()


def _secret() -> str:
    try:
        return str(settings.SECRET_KEY)
    except ImproperlyConfigured:  # a project without one (scripts, benchmarks)
        return ""


@functools.cache
def _key() -> bytes:
    """The gates' hash key: blake2b takes at most 64 bytes. Kept until
    ``SECRET_KEY`` changes (``override_settings``): where a project has none,
    Django raises and ``_secret`` catches on every read, a cost for each
    acquisition and release."""
    return hashlib.blake2b(_secret().encode()).digest()


def _secret_changed(*, setting: str, **kwargs: object) -> None:
    if setting == "SECRET_KEY":
        _key.cache_clear()


setting_changed.connect(_secret_changed, dispatch_uid="django_dlock.backends.mysql.wake")


def gate_of(connection: BaseDatabaseWrapper, table: str, resource: str, owner: str) -> str:
    """The gate of ``owner``'s hold of ``resource`` in the lock table ``table``
    (quoted) of the database that ``connection`` reaches."""
    return gate_name(str(connection.settings_dict["NAME"]), table, resource, owner)


def kept_with_gate(kept: str, *, take: bool) -> str:
    """The ``SELECT`` of what a one-row ``UPDATE`` kept (``one_row``), with one
    column more that holds the gate (``%(gate)s``) where the take made a new
    holder, or gives it up where the release freed the lock (or found it
    another's, or expired: the gate is no longer this session's to hold)."""
    if take:
        hold = HOLD_GATE.replace("%s", "%(gate)s")
        return f"{kept}, IF(@dlock_act = 'new', {hold}, NULL)"
    return (
        f"{kept}, IF(@dlock_act IN ('released', 'forbidden', 'not_found'), "
        "RELEASE_LOCK(%(gate)s), NULL)"
    )
