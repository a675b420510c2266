"""``lock()`` and what it stands on, one concept a module:

- ``context``: the ``lock`` context manager, async context manager and decorator;
- ``handle``: ``LockHandle``, what the holder gets, and whether the lock is lost;
- ``renewal``: one renewal and why it can fail; ``renewer``: the auto-renew thread;
- ``waiting``: the queue of waiters in the database, and the backoff between looks.
"""

from __future__ import annotations

from django_dlock.locking.context import lock
from django_dlock.locking.handle import LockHandle

__all__ = ["LockHandle", "lock"]
