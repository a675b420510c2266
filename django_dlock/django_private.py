"""The private parts of Django that django-dlock reads, each with why no public
API serves, in one place: a Django upgrade that changes one of them breaks here.

- ``Atomic._from_testcase``: whether a transaction is the one Django's
  ``TestCase`` wraps each test in. Django has no public way to tell; its own
  ``atomic(durable=True)`` checks this attribute for the same reason.
- SQLite's ``DatabaseWrapper.transaction_mode``: the ``BEGIN`` mode that
  ``atomic()`` uses (``OPTIONS["transaction_mode"]``, Django 5.1+). There is no
  public way to begin one transaction ``IMMEDIATE`` on a connection configured
  otherwise.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def is_testcase_transaction(block: object) -> bool:
    """Whether ``block`` (an entry of ``connection.atomic_blocks``) is the
    transaction Django's ``TestCase`` wraps each test in."""
    return bool(getattr(block, "_from_testcase", False))


@contextmanager
def sqlite_begin_immediate(connection: Any) -> Iterator[None]:
    """While inside, ``atomic()`` on the (connected) SQLite ``connection``
    begins with ``BEGIN IMMEDIATE`` (unless it is configured ``EXCLUSIVE``,
    which excludes even more)."""
    configured_mode = connection.transaction_mode
    if configured_mode != "EXCLUSIVE":
        connection.transaction_mode = "IMMEDIATE"
    try:
        yield
    finally:
        connection.transaction_mode = configured_mode
