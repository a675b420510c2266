"""``LockKind``: which kind of hold an acquisition asks for (an exclusive lock,
a reader of a shared lock, a permit of a semaphore, each reentrant or not),
and the one place where a kind is checked. ``lock()``, the manager's
``acquire()``, the HTTP API, ``manage.py dlock run`` and the task decorators
all build their kind here, so that each refuses the same arguments with the
same message."""

from __future__ import annotations

from dataclasses import dataclass

from django.utils.translation import gettext as _

from django_dlock.exceptions import InvalidArgument
from django_dlock.rules import EXCLUSIVE, SHARED
from django_dlock.validators import validate_limit

__all__ = ["LockKind"]


@dataclass(frozen=True)
class LockKind:
    """An exclusive lock (the default), a reader (``shared``), or a permit of
    a semaphore of ``limit`` permits (shared by its holders, so ``shared`` is
    always true with a limit); ``reentrant``: the holder again adds a hold.

    Checked when made (``validate()``): an invalid kind never exists. Invalid
    values raise ``InvalidArgument`` (a ``ValidationError`` and a ``ValueError``).
    """

    shared: bool = False
    limit: int | None = None
    reentrant: bool = False

    def __post_init__(self) -> None:
        self.validate()
        if self.limit is not None and not self.shared:
            # A semaphore's permits are shared holds: one kind, one spelling,
            # so that LockKind(limit=3) == LockKind.semaphore(3).
            object.__setattr__(self, "shared", True)

    def validate(self) -> None:
        """Raise ``InvalidArgument`` unless this is a kind of hold: ``shared``
        and ``reentrant`` booleans, ``limit`` None or a whole number of permits
        from 1 to ``MAX_LIMIT``. ``shared`` with a limit is the semaphore."""
        for name in ("shared", "reentrant"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidArgument(
                    _("%(name)s must be True or False."), code="invalid", params={"name": name}
                )
        if self.limit is not None:
            validate_limit(self.limit)

    @classmethod
    def from_flags(
        cls, *, shared: object = False, limit: int | None = None, reentrant: object = False
    ) -> LockKind:
        """The kind of ``lock()``'s and ``acquire()``'s arguments of the same
        names (flags are read as booleans, as they always were; ``validate()``
        checks the limit, whatever a caller without type checks passed)."""
        if limit is None:  # one of four kinds, checked when this module was loaded
            return _WITHOUT_LIMIT[bool(shared), bool(reentrant)]
        return cls(shared=bool(shared), limit=limit, reentrant=bool(reentrant))

    @classmethod
    def exclusive(cls, *, reentrant: bool = False) -> LockKind:
        """One holder at a time."""
        return cls(reentrant=reentrant)

    @classmethod
    def shared_lock(cls, *, reentrant: bool = False) -> LockKind:
        """One of many readers, none beside an exclusive holder."""
        return cls(shared=True, reentrant=reentrant)

    @classmethod
    def semaphore(cls, limit: int, *, reentrant: bool = False) -> LockKind:
        """One of at most ``limit`` permits."""
        return cls(shared=True, limit=limit, reentrant=reentrant)

    @property
    def is_exclusive(self) -> bool:
        """Whether its holder excludes every other holder: the one place this
        is worked out (a semaphore's permits are shared: a limit makes
        ``shared`` true)."""
        return not self.shared

    @property
    def mode(self) -> str:
        """``"exclusive"`` or ``"shared"``: the ``mode`` of the holds it gives."""
        return EXCLUSIVE if self.is_exclusive else SHARED


# The kinds without a limit, by (shared, reentrant): every lock operation asks for one.
_WITHOUT_LIMIT = {
    (shared, reentrant): LockKind(shared=shared, reentrant=reentrant)
    for shared in (False, True)
    for reentrant in (False, True)
}
