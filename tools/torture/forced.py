"""An operator's force-release, and the sections of invariant 16 that end in
one: the hold is lost, not released, so its lock-delay runs from that moment
(``check_delays``)."""

from __future__ import annotations

from django.db import DatabaseError

from django_dlock.models import DistributedLock
from tools.torture.asked import Asked
from tools.torture.db_clock import database_now
from tools.torture.history import now
from tools.torture.operations import Operations, Outcome


class ForcedOperations(Operations):
    """A torture process's calls, with the operator's force-release."""

    def force_release(self, resource: str, holder: str | None = None) -> Outcome | None:
        """An operator's release of every hold of ``resource``, or of ``holder``'s;
        recorded with ``db_now``, the database's clock read just before (the
        lock-delay of a holder it released runs from a moment no earlier)."""
        extra = {"owner": holder} if holder else {}
        try:
            extra["db_now"] = database_now()
        except DatabaseError:
            self.reset()  # the call goes on without it (recorded, or raising)
        return self.call(
            "force_release",
            lambda: {"released": DistributedLock.objects.force_release(resource, owner=holder)},
            resource=resource,
            **extra,
        )

    def forced_section(self, resource: str, ttl: float, asked: Asked, holder: bool) -> None:
        """acquire, write, and an operator's force-release of the hold (of
        every hold of ``resource``, or of this holder's): the hold is lost, not
        released, so its lock-delay runs from that moment. The holder's release
        then finds nothing."""
        owner, t0 = self.owner(), now()
        outcome = self.acquire(resource, owner, ttl, asked)
        if not outcome or not outcome["lock"]:
            return
        cs = self.enter(resource, outcome["lock"], t0, asked)
        token, deadline = outcome["lock"]["token"], t0 + ttl
        self.work(cs, asked, resource, token, 0, lambda: now() >= deadline)
        forced = self.force_release(resource, owner if holder else None)
        if forced and forced["released"]:
            self.told(cs, "force-released")
        self.recorder.write("cs_exit", cs=cs, t=now(), expires_at=outcome["lock"]["expires_at"])
        self.release_section(resource, owner, cs)
