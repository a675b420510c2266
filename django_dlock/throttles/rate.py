"""A throttle's rate as a value: at most ``limit`` uses in any ``period``
(``parsing`` reads it from what people write, "10/m")."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

__all__ = ["Rate"]


@dataclass(frozen=True)
class Rate:
    """At most ``limit`` uses in any ``period``; ``text`` is how it was written."""

    limit: int
    period: timedelta
    text: str

    def __str__(self) -> str:
        return self.text

    @property
    def period_text(self) -> str:
        """The period in words: "1 s", "10 min", "2 h", "1 d" (its largest whole unit)."""
        seconds = int(self.period.total_seconds())
        for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
            if seconds % size == 0:
                return f"{seconds // size} {unit}"
        return f"{seconds} s"
