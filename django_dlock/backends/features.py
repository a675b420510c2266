"""What a database's lock backend can do: one ``features`` object per backend,
as Django's ``connection.features``.

Every capability the other layers ask about is a flag here, with the reason
for its value beside it; a vendor subclasses ``BackendFeatures`` in
``backends/<vendor>/features.py`` and changes the flags that differ.
"""

from __future__ import annotations

from functools import cached_property


class BackendFeatures:
    """The capabilities of the lock backend of one database alias."""

    #: Whether every process that waits runs on the database's host (SQLite):
    #: then the head of a queue may look often, each look costing microseconds.
    waiters_share_host: bool = False

    #: Whether a release hands the lock to the head of its queue, which then
    #: takes the offer (``LockBackend.granted``) rather than acquire.
    grants_on_release: bool = False

    #: Whether such a release also grants readers and permits their shared
    #: holds (``backends.shared_grants``), rather than only wake them.
    grants_shared_on_release: bool = False

    #: The dotted path of the ``Listener`` class whose thread receives the
    #: releases that wake this database's waiters; None: waiters poll.
    listener_class: str | None = None

    #: Whether the head of a queue can wait for the release inside the
    #: database, on its own connection (``WaiterQueue.wait_for_release``:
    #: MariaDB's named locks), where no listener wakes it.
    waits_for_release: bool = False

    #: Whether the vendor's one-statement operations run: an acquisition or a
    #: release decided in the statement that writes, where the row alone settles
    #: it (else, and for what the row cannot settle, the portable operations).
    one_statement: bool = False

    def __init__(self, using: str) -> None:
        self.using = using

    @cached_property
    def can_listen(self) -> bool:
        """Whether releases can wake this process's waiters (``listener_class``):
        the listener exists, and what it needs is there at run time."""
        return self.listener_class is not None
