"""What kind of hold a torture call asks for, as ``lock()`` and the manager
take it and as the history records it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Asked:
    """What kind of hold an acquisition asks for."""

    shared: bool = False
    limit: int | None = None
    reentrant: bool = False
    leader: bool = False  # lock(timeout=inf, auto_renew=True): a term
    lock_delay: float | None = None  # seconds (exclusive holds): kept after a loss

    @property
    def kind(self) -> str:
        """The section's kind: exclusive, shared (a reader), permit or leader."""
        if self.limit is not None:
            return "permit"
        if self.leader:
            return "leader"
        return "shared" if self.shared else "exclusive"

    def fields(self) -> dict[str, Any]:
        """As the history records it (only what differs from an exclusive hold)."""
        fields: dict[str, Any] = {"shared": self.shared, "limit": self.limit}
        fields |= {"reentrant": self.reentrant}
        fields |= {"leader": self.leader, "lock_delay": self.lock_delay}
        return {key: value for key, value in fields.items() if value}

    def arguments(self) -> dict[str, Any]:
        arguments = {"shared": self.shared, "limit": self.limit, "reentrant": self.reentrant}
        return arguments | ({"lock_delay": self.lock_delay} if self.lock_delay else {})


EXCLUSIVE = Asked()
