"""``dlock list``, ``dlock show`` and ``dlock release``: what operators see and do."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from django.core.management.base import CommandError

from django_dlock.cli.holds import Hold, free_row, holds_of, listed_holds, release_hold, waiters
from django_dlock.conf import conf
from django_dlock.humanize import DELAYED, duration_in_words, kind_in_words, time_left_in_words
from django_dlock.waitfor import (
    WAITERS_PER_RESOURCE,
    HeldLock,
    Node,
    deadlock_in_words,
    queue_head,
    wait_for_graph,
    waiting_while_holding,
)

__all__ = ["list_holds", "release", "show"]

Write = Callable[[str], None]


def list_holds(
    write: Write, *, prefix: str, include_free: bool, show_owners: bool, graph: bool = False
) -> None:
    """One line per hold, then one per resource that has waiters and no hold;
    with ``graph``, then the waiters that hold other locks and the deadlocks."""
    holds = listed_holds(prefix=prefix, include_free=include_free)
    queued = waiters(prefix=prefix)
    header = ["RESOURCE", "KIND", "LABEL", "TOKEN", "EXPIRES", "WAITERS"]
    rows = [
        [
            hold.resource,
            hold.kind,
            hold.label or "-",
            str(hold.fencing_token),
            _expiry(hold),
            str(queued[hold.resource]),
        ]
        + ([hold.owner or "-"] if show_owners else [])
        for hold in holds
    ]
    listed = {hold.resource for hold in holds}
    rows += [
        [resource, "-", "-", "-", "free", str(count)] + (["-"] if show_owners else [])
        for resource, count in sorted(queued.items())
        if resource not in listed
    ]
    if not rows:
        write(f"No locks held{f' under {prefix!r}' if prefix else ''}.")
    else:
        _table(write, header + (["OWNER"] if show_owners else []), rows)
    if graph:
        _list_graph(write, prefix)


def _list_graph(write: Write, prefix: str) -> None:
    found, deadlocks = waiting_while_holding(using=conf.DATABASE, prefix=prefix)
    write("waiting while holding:")
    for waiter in found:
        write(f"  {waiter.resource}: {waiter.name} holds {_held(waiter.holding)}")
    if not found:
        write("  none")
    for cycle in deadlocks:
        write(f"  deadlock: {deadlock_in_words(cycle)}")
    if not deadlocks:
        write("  no deadlock")


def show(write: Write, resource: str, *, show_owners: bool, graph: bool = False) -> None:
    """The resource's holds (or when it came free, and its last token; or, while
    its holder's lock-delay runs, when it becomes available) and its waiters;
    with ``graph``, then the wait-for graph around it (``show_graph``)."""
    holds = holds_of(resource)
    if holds:
        write(f"{resource}: held ({_kind_in_words(holds)})")
    elif (row := free_row(resource)) is not None and row.status == DELAYED:
        write(
            f"{resource}: delayed ({_expiry(row)}, at {_utc(row.available_at)}: its holder "
            f"lost it with a lock delay of {_delay(row)}; last fencing token {row.fencing_token})"
        )
    elif row is not None:
        write(f"{resource}: free ({_expiry(row)}; last fencing token {row.fencing_token})")
    else:
        write(f"{resource}: free (never locked, or purged)")
    for hold in holds:
        details = [
            f"label {hold.label or '-'}",
            f"fencing token {hold.fencing_token}",
            f"acquired {_utc(hold.acquired_at)}",
            f"expires {_expiry(hold)}",
        ]
        if hold.lock_delay is not None:
            details.append(f"lock delay {_delay(hold)}")
        if hold.hold_count > 1:
            details.append(f"held {hold.hold_count} times (reentrant)")
        if show_owners:
            details.append(f"owner {hold.owner}")
        write("  " + ", ".join(details))
    _write_queue(write, resource, show_owners=show_owners)
    if graph:
        show_graph(write, resource)


def _write_queue(write: Write, resource: str, *, show_owners: bool) -> None:
    """The resource's live waiters in queue order: the head of the queue as the
    wait-for graph reads it, each with its label (or ticket) and what it asks for."""
    queued, more = queue_head(resource, using=conf.DATABASE, shown=WAITERS_PER_RESOURCE)
    write(f"waiters: {len(queued) + more}")
    for position, waiter in enumerate(queued, start=1):
        name = repr(waiter.label) if waiter.label else f"ticket {waiter.pk}"
        details = [f"{position}. {name}", f"asks for {kind_in_words(waiter.mode, waiter.limit)}"]
        if show_owners:
            details.append(f"owner {waiter.owner}")
        write("  " + ", ".join(details))
    if more:
        write(f"  and {more} more waiter{'s' if more != 1 else ''}")


def show_graph(write: Write, resource: str) -> None:
    """The wait-for graph around ``resource``, breadth-first: each resource
    with its holders (and what they wait for) and its waiters in queue order
    (and what each holds), then the deadlocks among them. Never an owner."""
    found = wait_for_graph(resource, using=conf.DATABASE)
    write("wait-for graph:")
    for node in found.nodes:
        _write_node(write, node)
    if found.not_followed:
        write(f"  further away, not shown: {', '.join(found.not_followed)}")
    for cycle in found.deadlocks:
        write(f"  deadlock: {deadlock_in_words(cycle)}")
    if not found.deadlocks:
        write("  no deadlock")


def _write_node(write: Write, node: Node) -> None:
    holders = ", ".join(
        holder.name() + (f" (waiting for {holder.waiting_for})" if holder.waiting_for else "")
        for holder in node.holders
    )
    write(f"  {node.resource}: {f'held by {holders}' if holders else 'not held'}")
    for waiter in node.waiters:
        held = _held(waiter.holding)
        write(
            f"    {waiter.position}. {waiter.name()} {f'holds {held}' if held else 'holds nothing'}"
        )
    if node.more_waiters:
        write(f"    and {node.more_waiters} more waiter{'s' if node.more_waiters != 1 else ''}")


def _held(holding: Sequence[HeldLock]) -> str:
    return ", ".join(lock.resource + ("" if lock.valid else " (not held now)") for lock in holding)


def release(
    write: Write, resource: str, *, holder: str | None, confirm: Callable[[str], bool]
) -> None:
    """Force-release the resource's holds (those labelled ``holder``) once
    ``confirm(question)`` says yes. Raises ``CommandError`` when there is
    nothing to release or the answer is no."""
    holds = holds_of(resource)
    if not holds:
        raise CommandError(f"The lock on {resource!r} is not held: nothing to release.")
    if holder is not None:
        labels = ", ".join(sorted({hold.label or "-" for hold in holds}))
        holds = [hold for hold in holds if hold.label == holder]
        if not holds:
            raise CommandError(
                f"No holder of {resource!r} has the label {holder!r} (its holders' labels: {labels})."
            )
    if len(holds) == 1:
        [hold] = holds
        who = f"held by {hold.label!r}" if hold.label else "held by an unlabelled holder"
        question = (
            f"Release the lock on {resource!r} {who} (fencing token {hold.fencing_token}, "
            f"expires {_expiry(hold)})?"
        )
    else:
        labels = ", ".join(hold.label or "-" for hold in holds)
        question = f"Release the {len(holds)} holds of {resource!r} (labels: {labels})?"
    if not confirm(question):
        raise CommandError(f"Not released: the lock on {resource!r} is still held.")
    for hold in holds:
        if release_hold(hold):
            write(f"Released the lock on {resource!r} (fencing token {hold.fencing_token}).")
        else:
            write(
                f"The lock on {resource!r} (fencing token {hold.fencing_token}) "
                "had ended meanwhile: nothing released."
            )


def _kind_in_words(holds: Sequence[Hold]) -> str:
    first = holds[0]
    if first.limit is not None:
        return f"semaphore, {len(holds)} of {first.limit} permits"
    if first.mode == "shared":
        return f"shared, {len(holds)} reader{'s' if len(holds) != 1 else ''}"
    return "exclusive"


def _expiry(hold: Hold) -> str:
    return time_left_in_words(hold.status, hold.expires_at, hold.now, hold.available_at)


def _delay(hold: Hold) -> str:
    return duration_in_words(hold.lock_delay.total_seconds()) if hold.lock_delay else "-"


def _utc(moment: datetime | None) -> str:
    return "-" if moment is None else f"{moment.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}"


def _table(write: Write, header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(row[column]) for row in [header, *rows]) for column in range(len(header))]
    for row in [header, *rows]:
        write(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )
