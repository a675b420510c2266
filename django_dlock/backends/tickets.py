"""Tickets: a waiter's place in the queue (every statement orders waiters by it).

A ticket is the database's time of queuing in microseconds, less a minute per
step of the waiter's priority (``PRIORITY_STEP``), times ``TICKET_SPREAD``, plus
this process's next number below that (``_spread``), so that two processes'
tickets of one tick of the clock (a millisecond on SQLite) rarely meet (one that
does is queued again: ``locking.queue.Queue.join``); and never below this
process's last ticket of the same priority (``record_ticket``), so that the
waiters one process queues within a tick keep their order. A waiter of priority
N goes ahead of those of priority M < N that queued less than (N - M) minutes
before it, and behind those that queued earlier: FIFO within a priority, and
nobody is passed by newcomers for more than the priorities' spread in minutes
(ageing, so no waiter starves). Far below NO_TICKET for centuries.
"""

from __future__ import annotations

import itertools
import secrets
from datetime import timedelta
from typing import Any

__all__ = [
    "EPOCH_MICROSECONDS",
    "NO_TICKET",
    "PRIORITY_STEP",
    "TICKET_SPREAD",
    "new_ticket_sql",
    "new_ticket_values",
    "record_ticket",
    "ticket_sql",
]

# "No ticket yet" for queue_state(): every queued waiter is ahead.
NO_TICKET = 2**62

PRIORITY_STEP = timedelta(minutes=1)
TICKET_SPREAD = 1024
# This process's numbers of its tickets within a tick, from a random start.
_spread = itertools.count(secrets.randbelow(TICKET_SPREAD))
# This process's last ticket of each priority.
_last_ticket: dict[int, int] = {}
# The larger of two numbers, by vendor.
_GREATEST = {"postgresql": "GREATEST", "mysql": "GREATEST", "sqlite": "MAX"}

# The database's clock in microseconds since the epoch, by vendor.
EPOCH_MICROSECONDS = {
    "postgresql": "CAST(EXTRACT(EPOCH FROM STATEMENT_TIMESTAMP()) * 1000000 AS BIGINT)",
    "mysql": "CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)",
    "sqlite": "CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)",
}


def record_ticket(priority: int, ticket: int) -> None:
    """Note ``ticket``, this process's newest of ``priority`` (see ``PRIORITY_STEP``)."""
    _last_ticket[priority] = max(ticket, _last_ticket.get(priority, 0))


def new_ticket_sql(vendor: str, priority: int) -> tuple[str, list[Any]]:
    """SQL and parameters of a new ticket of ``priority`` on ``vendor``."""
    return ticket_sql(vendor), new_ticket_values(priority)


def ticket_sql(vendor: str, step: str = "%s", spread: str = "%s", after: str = "%s") -> str:
    """SQL of a new ticket on ``vendor``, from the placeholders of
    ``new_ticket_values``: the priority's step, this process's number, and the
    least ticket it may be."""
    epoch = EPOCH_MICROSECONDS[vendor]
    return f"{_GREATEST[vendor]}((({epoch}) - {step}) * {TICKET_SPREAD} + {spread}, {after})"


def new_ticket_values(priority: int) -> list[int]:
    """The values of ``ticket_sql``'s placeholders for a new ticket of ``priority``."""
    step = priority * (PRIORITY_STEP // timedelta(microseconds=1))
    spread = next(_spread) % TICKET_SPREAD
    return [step, spread, _last_ticket.get(priority, 0) + 1]
