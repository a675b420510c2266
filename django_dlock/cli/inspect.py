"""``dlock list``, ``dlock show`` and ``dlock release``: what operators see and do."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC

from django.core.management.base import CommandError

from django_dlock.admin import time_left_in_words
from django_dlock.cli.holds import ACTIVE, Hold, read_holds, release_hold, waiters

__all__ = ["list_holds", "release", "show"]

Write = Callable[[str], None]


def list_holds(write: Write, *, prefix: str, include_expired: bool, show_owners: bool) -> None:
    """One line per hold, then one per resource that has waiters and no hold."""
    holds = read_holds(prefix=prefix, include_expired=include_expired)
    queued = waiters(prefix=prefix)
    header = ["RESOURCE", "MODE", "LABEL", "TOKEN", "EXPIRES", "WAITERS"]
    rows = [
        [
            hold.resource,
            hold.mode,
            hold.label or "-",
            str(hold.fencing_token),
            _expiry(hold),
            str(queued[hold.resource]),
        ]
        + ([hold.owner] if show_owners else [])
        for hold in holds
    ]
    held = {hold.resource for hold in holds}
    rows += [
        [resource, "-", "-", "-", "free", str(count)] + (["-"] if show_owners else [])
        for resource, count in sorted(queued.items())
        if resource not in held
    ]
    if not rows:
        write(f"No locks held{f' under {prefix!r}' if prefix else ''}.")
        return
    _table(write, header + (["OWNER"] if show_owners else []), rows)


def show(write: Write, resource: str, *, show_owners: bool) -> None:
    """The resource's holds (or its last holder's token once free) and its waiters."""
    holds = read_holds(resource=resource, include_expired=True)
    active = [hold for hold in holds if hold.status == ACTIVE]
    if active:
        write(f"{resource}: held ({', '.join(sorted({hold.mode for hold in active}))})")
    elif holds:
        write(
            f"{resource}: free ({_expiry(holds[0])}; last fencing token {holds[0].fencing_token})"
        )
    else:
        write(f"{resource}: free (never locked, or purged)")
    for hold in active:
        details = [
            f"mode {hold.mode}",
            f"label {hold.label or '-'}",
            f"fencing token {hold.fencing_token}",
            f"acquired {_iso(hold)}",
            f"expires {_expiry(hold)}",
        ]
        if show_owners:
            details.append(f"owner {hold.owner}")
        write("  " + ", ".join(details))
    write(f"waiters: {waiters(resource=resource)[resource]}")


def release(
    write: Write, resource: str, *, holder: str | None, confirm: Callable[[str], bool]
) -> None:
    """Force-release the resource's holds (those labelled ``holder``), each after
    ``confirm(question)`` says yes. Raises ``CommandError`` when there is nothing
    to release or the answer is no."""
    holds = read_holds(resource=resource)
    if not holds:
        raise CommandError(f"The lock on {resource!r} is not held: nothing to release.")
    if holder is not None:
        labels = sorted({hold.label or "-" for hold in holds})
        holds = [hold for hold in holds if hold.label == holder]
        if not holds:
            raise CommandError(
                f"No holder of {resource!r} has the label {holder!r} "
                f"(its holders' labels: {', '.join(labels)})."
            )
    for hold in holds:
        who = f"held by {hold.label!r}" if hold.label else "held by an unlabelled holder"
        question = (
            f"Release the lock on {resource!r} {who} (fencing token {hold.fencing_token}, "
            f"expires {_expiry(hold)})?"
        )
        if not confirm(question):
            raise CommandError(f"Not released: the lock on {resource!r} is still held.")
        if release_hold(hold):
            write(f"Released the lock on {resource!r} (fencing token {hold.fencing_token}).")
        else:
            write(
                f"The lock on {resource!r} (fencing token {hold.fencing_token}) "
                "had ended meanwhile: nothing released."
            )


def _expiry(hold: Hold) -> str:
    return time_left_in_words(hold.status, hold.expires_at, hold.now)


def _iso(hold: Hold) -> str:
    return hold.acquired_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _table(write: Write, header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(row[column]) for row in [header, *rows]) for column in range(len(header))]
    for row in [header, *rows]:
        write(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )
