"""The ``DLOCK_*`` settings, read when first used and again after they change
(``override_settings`` and pytest-django's ``settings`` fixture tell Django's
``setting_changed``), never at import time."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeGuard, TypeVar

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed

_T = TypeVar("_T")


def is_seconds(value: object) -> TypeGuard[int | float]:
    """Whether a setting's ``value`` is a number of seconds greater than 0 (a bool is not)."""
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


class Settings:
    """One property per setting; README.md documents each of them.

    Each value is kept once read: every lock operation reads some of them, and
    Django's settings raise and catch an ``AttributeError`` for each setting a
    project leaves unset, on every read.
    """

    def __init__(self) -> None:
        self._values: dict[str, Any] = {}
        # {ttl: how long a lock taken for it lasts}, of the ttls these settings
        # found valid (``rules.duration_of``): forgotten with them.
        self.durations: dict[float | None, timedelta] = {}

    def _setting(self, name: str, default: _T) -> _T:
        """``DLOCK_{name}``, or ``default`` when it is not set (``checks`` reports
        a value of the wrong type)."""
        # (Annotated, not cast(): a call for nothing on every read of a setting.)
        value: _T
        try:
            value = self._values[name]
        except KeyError:
            value = self._values[name] = getattr(settings, f"DLOCK_{name}", default)
        return value

    def forget(self) -> None:
        """Read every setting again when next used."""
        self._values.clear()
        self.durations.clear()

    @property
    def DEFAULT_TTL(self) -> float:
        """Seconds a lock lives when the caller names no ttl. Raises
        ``ImproperlyConfigured`` naming the setting when it is no such number:
        the caller, who named no ttl, is not at fault."""
        value = self.default_ttl_as_set()
        if not is_seconds(value):
            raise ImproperlyConfigured(
                f"DLOCK_DEFAULT_TTL must be a number of seconds greater than 0, not "
                f"{value!r} (manage.py check: django_dlock.E001)."
            )
        if is_seconds(self.MAX_TTL) and value > self.MAX_TTL:
            raise ImproperlyConfigured(
                f"DLOCK_DEFAULT_TTL ({value!r}) is larger than DLOCK_MAX_TTL "
                f"({self.MAX_TTL!r}) (manage.py check: django_dlock.E003)."
            )
        return value

    def default_ttl_as_set(self) -> object:
        """``DLOCK_DEFAULT_TTL`` as the project set it, unchecked: for ``checks``,
        which reports what is wrong with it."""
        return self._setting("DEFAULT_TTL", 60)

    @property
    def MAX_TTL(self) -> float:
        """The largest ttl a caller may ask for, in seconds."""
        return self._setting("MAX_TTL", 86400)

    @property
    def DATABASE(self) -> str:
        """The database alias whose connection every lock operation uses."""
        return self._setting("DATABASE", "default")

    @property
    def API_PERMISSION_CLASSES(self) -> list[str]:
        """Dotted paths of the DRF permission classes of the lock API."""
        return self._setting(
            "API_PERMISSION_CLASSES",
            ["rest_framework.permissions.IsAuthenticated"],
        )

    @property
    def BACKOFF_BASE(self) -> float:
        """First wait between two tries of a blocking acquire, in seconds."""
        return self._setting("BACKOFF_BASE", 0.002)

    @property
    def BACKOFF_MAX(self) -> float:
        """The longest wait between two tries of a blocking acquire, in seconds."""
        return self._setting("BACKOFF_MAX", 0.5)

    @property
    def LISTEN(self) -> bool | str:
        """Whether waiters are woken by the release (PostgreSQL ``LISTEN``/``NOTIFY``,
        SQLite datagrams on the host, MariaDB's gates): True, False (always poll), or "auto"
        (listen, except behind a connection pooler)."""
        return self._setting("LISTEN", "auto")

    @property
    def RESOURCE_GROUP(self) -> str | Callable[[str], str] | None:
        """What the metrics and traces label a resource with: a function of the
        resource name, or its dotted path; None: the part before the first ":"."""
        return self._setting("RESOURCE_GROUP", None)

    @property
    def RESOURCE_GROUPS(self) -> list[str] | tuple[str, ...] | set[str] | frozenset[str] | None:
        """The resource groups the metrics and traces tell apart by default: a
        name's part before its first ":" when listed here, any other "other";
        None: every such part (up to a per-process cap)."""
        return self._setting("RESOURCE_GROUPS", None)

    @property
    def THROTTLE_RATES(self) -> dict[str, str]:
        """Named throttle rates: ``throttle(key, rate="email")`` uses
        ``DLOCK_THROTTLE_RATES["email"]`` ("10/m"), read at each use."""
        return self._setting("THROTTLE_RATES", {})

    @property
    def ADMIN_EDIT_TTL(self) -> float:
        """Seconds an edit-lock of the admin (``EditLockMixin``) lives unless the
        open change page renews it (every third of it)."""
        return self._setting("ADMIN_EDIT_TTL", 60)

    @property
    def BEAT_SCHEDULER(self) -> str:
        """The dotted path of the beat scheduler that ``contrib.celery.LeaderScheduler``
        wraps (``:`` or ``.`` before the class)."""
        return self._setting("BEAT_SCHEDULER", "celery.beat:PersistentScheduler")

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"django-dlock has no setting DLOCK_{name}")


conf = Settings()


def _setting_changed(*, setting: str, **kwargs: Any) -> None:
    if setting.startswith("DLOCK_"):
        conf.forget()


setting_changed.connect(_setting_changed, dispatch_uid="django_dlock.conf")
