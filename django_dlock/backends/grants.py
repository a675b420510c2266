"""The writes of an admission: what ``admit()`` decided for a claim, carried
out on the resource's locked row and its shared holds (the portable
operations of ``LockBackend``)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from django_dlock.backends.admission import Action, Admission
from django_dlock.backends.holds import Holds
from django_dlock.backends.lock_rows import LockRows
from django_dlock.backends.results import LockRow, Refusal, Taken
from django_dlock.rules import SHARED_HOLDERS
from django_dlock.rules.claim import Claim

# The columns a new holder of a resource's row writes.
HEADER_WRITTEN = [
    "owner", "acquired_at", "expires_at", "fencing_token", "hold_count", "label", "limit",
    "lock_delay",
]  # fmt: skip


class Grants:
    """Carries out admissions with one alias's lock rows and holds."""

    def __init__(self, rows: LockRows, holds: Holds) -> None:
        self.rows = rows
        self.holds = holds

    def write(
        self, admission: Admission, header: LockRow, claim: Claim, holds: list[LockRow]
    ) -> Taken:
        """Write what ``admission`` decided for ``claim`` on the locked ``header``
        (beside its valid shared ``holds``); a refusal says why."""
        action, now = admission.action, header.now
        before = header.owner
        if action is Action.REFUSE:
            first_expiry = min((hold.expires_at for hold in holds), default=None)
            refusal = Refusal.of(header, first_expiry, grant_held=admission.hold is not None)
            return Taken(row=None, previous_owner=before, renewed=False, refusal=refusal)
        if action is Action.MISMATCH:
            return Taken(row=None, previous_owner=before, renewed=False, mismatch=admission.kind)
        expires_at = now + claim.duration
        if action is Action.AGAIN:
            hold_count = header.hold_count + 1 if claim.adds_a_hold else header.hold_count
            # A lock-delay asked for now replaces the grant's; none asked keeps it
            # (a re-entry without one, or a release's hand-over, which wrote none).
            delay = header.lock_delay if claim.lock_delay is None else claim.lock_delay
            row = replace(header, expires_at=expires_at, hold_count=hold_count, lock_delay=delay)
            self.rows.update(row, ["expires_at", "hold_count", "lock_delay"])
            return Taken(row=row, previous_owner=before, renewed=True)
        if action is Action.AGAIN_SHARED:
            assert admission.hold is not None  # noqa: S101 - admit() gives the hold
            hold = admission.hold
            hold_count = hold.hold_count + 1 if claim.adds_a_hold else hold.hold_count
            hold = replace(hold, expires_at=expires_at, hold_count=hold_count)
            self.holds.update_hold(hold, ["expires_at", "hold_count"])
            self.cover(header, expires_at)
            return Taken(row=hold, previous_owner=before, renewed=True)
        if action in (Action.TAKE, Action.UPGRADE):
            hold_count = 1
            if admission.hold is not None:  # the reader's holds carry over
                hold_count = admission.hold.hold_count
                self.holds.delete_holds(claim.resource)
            row = replace(
                header,
                owner=claim.owner,
                acquired_at=now,
                expires_at=expires_at,
                fencing_token=header.fencing_token + 1,
                hold_count=hold_count,
                label=claim.label,
                limit=None,
                lock_delay=claim.lock_delay,
            )
            self.rows.update(row, HEADER_WRITTEN)
            return Taken(row=row, previous_owner=before, renewed=False)
        if action is Action.DOWNGRADE:
            hold = self._hold_for(replace(header, owner="", hold_count=header.hold_count), claim)
            return Taken(row=hold, previous_owner=before, renewed=False)
        # JOIN: a new shared hold
        hold = self._hold_for(header, claim, others=len(holds))
        return Taken(row=hold, previous_owner=before, renewed=False)

    def _hold_for(
        self, header: LockRow, claim: Claim, *, hold_count: int = 1, others: int = 0
    ) -> LockRow:
        """A new shared hold of ``claim`` beside the ``others`` valid holds
        ``header`` covers, with the resource's next token; the header then
        shows shared holders, and how many."""
        token = header.fencing_token + 1
        shared_before = header.held_by_shared and others > 0
        hold = self.holds.insert_hold(
            claim.resource,
            claim.owner,
            claim.duration,
            token=token,
            label=claim.label,
            limit=claim.kind.limit,
            hold_count=hold_count,
        )
        if shared_before:  # its hold_count counts the shared holds
            covered = replace(
                header,
                fencing_token=token,
                expires_at=max(header.expires_at, hold.expires_at),
                hold_count=others + 1,
            )
            self.rows.update(covered, ["fencing_token", "expires_at", "hold_count"])
        else:
            covered = replace(
                header,
                owner=SHARED_HOLDERS,
                acquired_at=hold.acquired_at,
                expires_at=hold.expires_at,
                fencing_token=token,
                hold_count=1,
                label="",
                limit=claim.kind.limit,
                lock_delay=None,
            )
            self.rows.update(covered, HEADER_WRITTEN)
        return hold

    def cover(self, header: LockRow, expires_at: datetime) -> None:
        """Keep the resource's row held until its last shared hold expires."""
        if expires_at > header.expires_at:
            self.rows.update(replace(header, expires_at=expires_at), ["expires_at"])
