"""The holds of a lock as its page in the admin shows them: the exclusive
holder, or every reader or permit, each with its own force-release."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.utils.translation import gettext_lazy

from django_dlock.humanize import ACTIVE, kind_in_words, time_left_in_words
from django_dlock.models import DistributedLock
from django_dlock.rules import Hold


@dataclass(frozen=True)
class HolderRow:
    """One hold: its cells, and its owner (for its force-release)."""

    cells: list[str]
    owner: str


@dataclass(frozen=True)
class HolderTable:
    headers: list[str]
    rows: list[HolderRow]


def holder_table(resource: str, now: datetime, *, using: str, show_owners: bool) -> HolderTable:
    """The valid holds of ``resource``, oldest first (``DistributedLock.objects.holders``)."""
    holds = DistributedLock.objects.db_manager(using).holders(resource)
    headers = [
        gettext_lazy("label"),
        *([gettext_lazy("owner")] if show_owners else []),
        gettext_lazy("holds"),
        gettext_lazy("kind"),
        gettext_lazy("fencing token"),
        gettext_lazy("time left"),
    ]
    return HolderTable(
        headers=[str(header) for header in headers],
        rows=[HolderRow(_cells(hold, now, show_owners), hold.owner) for hold in holds],
    )


def _cells(hold: Hold, now: datetime, show_owners: bool) -> list[str]:
    return [
        hold.label or "—",
        *([hold.owner] if show_owners else []),
        str(hold.hold_count),
        kind_in_words(hold.mode, hold.limit),
        str(hold.fencing_token),
        time_left_in_words(ACTIVE, hold.expires_at, now),
    ]
