"""The ``DLOCK_*`` settings, read when accessed so that ``override_settings`` works."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings


class Settings:
    """One property per setting; README.md documents each of them."""

    @property
    def DEFAULT_TTL(self) -> float:
        """Seconds a lock lives when the caller names no ttl."""
        return getattr(settings, "DLOCK_DEFAULT_TTL", 60)

    @property
    def MAX_TTL(self) -> float:
        """The largest ttl a caller may ask for, in seconds."""
        return getattr(settings, "DLOCK_MAX_TTL", 86400)

    @property
    def DATABASE(self) -> str:
        """The database alias whose connection every lock operation uses."""
        return getattr(settings, "DLOCK_DATABASE", "default")

    @property
    def API_PERMISSION_CLASSES(self) -> list[str]:
        """Dotted paths of the DRF permission classes of the lock API."""
        return getattr(
            settings,
            "DLOCK_API_PERMISSION_CLASSES",
            ["rest_framework.permissions.IsAuthenticated"],
        )

    @property
    def BACKOFF_BASE(self) -> float:
        """First wait between two tries of a blocking acquire, in seconds."""
        return getattr(settings, "DLOCK_BACKOFF_BASE", 0.002)

    @property
    def BACKOFF_MAX(self) -> float:
        """The longest wait between two tries of a blocking acquire, in seconds."""
        return getattr(settings, "DLOCK_BACKOFF_MAX", 0.5)

    @property
    def LISTEN(self) -> bool | str:
        """Whether waiters are woken by the release (PostgreSQL ``LISTEN``/``NOTIFY``,
        SQLite datagrams on the host): True, False (always poll), or "auto"
        (listen, except behind a connection pooler)."""
        return getattr(settings, "DLOCK_LISTEN", "auto")

    @property
    def RESOURCE_GROUP(self) -> str | Callable[[str], str] | None:
        """What the metrics and traces label a resource with: a function of the
        resource name, or its dotted path; None: the part before the first ":"."""
        return getattr(settings, "DLOCK_RESOURCE_GROUP", None)

    @property
    def RESOURCE_GROUPS(self) -> list[str] | tuple[str, ...] | set[str] | frozenset[str] | None:
        """The resource groups the metrics and traces tell apart by default: a
        name's part before its first ":" when listed here, any other "other";
        None: every such part (up to a per-process cap)."""
        return getattr(settings, "DLOCK_RESOURCE_GROUPS", None)

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"django-dlock has no setting DLOCK_{name}")


conf = Settings()
