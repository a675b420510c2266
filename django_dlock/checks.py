"""``manage.py check``: the ``DLOCK_*`` settings, and the lock database as its
backend sees it (``LockBackend.check()``, one module per vendor in
``django_dlock/backends/<vendor>/checks.py``). The docs' checks page lists
every id; ids are never reused."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning
from django.db import connections
from django.utils.module_loading import import_string

from django_dlock.backends import BACKENDS, backend_for
from django_dlock.conf import Settings, conf, is_seconds
from django_dlock.contrib.labels import group_function
from django_dlock.exceptions import InvalidArgument
from django_dlock.throttles.parsing import parse_rate

# A ttl beyond this would push expires_at past what a datetime can hold.
LONGEST_TTL = 100 * 365 * 86400


def _not_seconds(name: str, value: object, example: str, *, check_id: str) -> Error:
    return Error(
        f"{name} must be a number of seconds greater than 0, not {value!r}.",
        hint=f"Set it to, for example, {example}.",
        id=check_id,
    )


def check_settings(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """Validate every ``DLOCK_*`` setting."""
    errors: list[CheckMessage] = []
    default_ttl, max_ttl = conf.default_ttl_as_set(), conf.MAX_TTL
    if not is_seconds(default_ttl):
        errors.append(
            _not_seconds("DLOCK_DEFAULT_TTL", default_ttl, "60", check_id="django_dlock.E001")
        )
    if not is_seconds(max_ttl) or max_ttl > LONGEST_TTL:
        errors.append(
            Error(
                f"DLOCK_MAX_TTL must be a number of seconds greater than 0 and at most "
                f"{LONGEST_TTL} (100 years), not {max_ttl!r}.",
                hint="Set it to, for example, 86400 (a day).",
                id="django_dlock.E002",
            )
        )
    if not errors and is_seconds(default_ttl) and default_ttl > max_ttl:
        errors.append(
            Error(
                f"DLOCK_DEFAULT_TTL ({default_ttl!r}) is larger than DLOCK_MAX_TTL ({max_ttl!r}).",
                hint="Lower DLOCK_DEFAULT_TTL or raise DLOCK_MAX_TTL.",
                id="django_dlock.E003",
            )
        )
    errors.extend(_check_backoff())
    errors.extend(_check_resource_group())
    errors.extend(_check_resource_groups())
    errors.extend(_check_throttle_rates())
    errors.extend(_check_admin_edit_ttl())
    errors.extend(_check_beat_scheduler())
    known = [
        f"DLOCK_{name}" for name, value in vars(Settings).items() if isinstance(value, property)
    ]
    for name in sorted(n for n in dir(settings) if n.startswith("DLOCK_") and n not in known):
        meant = _meant(name, known)
        errors.append(
            Warning(
                f"{name} is not a django-dlock setting; it has no effect.",
                hint=f"Did you mean {meant}?" if meant else "See the README's Settings.",
                id="django_dlock.W004",
            )
        )
    if _lock_alias() is None:
        errors.append(
            Error(
                f"DLOCK_DATABASE names {conf.DATABASE!r}, which is not a key of DATABASES.",
                hint=f"Use one of: {', '.join(map(repr, settings.DATABASES))}.",
                id="django_dlock.E004",
            )
        )
    return errors


def _meant(name: str, known: Sequence[str]) -> str | None:
    """The setting that ``name`` probably meant: the first of ``known``, in the
    order ``Settings`` declares them, whose words include each of its words (as
    DLOCK_DEFAULT_TTL for DLOCK_TTL, which the closest spelling would take for
    DLOCK_MAX_TTL); else the closest spelling."""
    words = set(name.split("_")[1:])
    for setting in known:
        if words <= set(setting.split("_")[1:]):
            return setting
    close = difflib.get_close_matches(name, known, n=1)
    return close[0] if close else None


def _check_admin_edit_ttl() -> list[CheckMessage]:
    """The ttl of the admin's edit-locks (``EditLockMixin``)."""
    ttl, max_ttl = conf.ADMIN_EDIT_TTL, conf.MAX_TTL
    if is_seconds(ttl) and (not is_seconds(max_ttl) or ttl <= max_ttl):
        return []
    return [
        Error(
            f"DLOCK_ADMIN_EDIT_TTL must be a number of seconds greater than 0 and at most "
            f"DLOCK_MAX_TTL, not {ttl!r}.",
            hint="Set it to, for example, 60 (the open change page renews it every 20 s).",
            id="django_dlock.E701",
        )
    ]


def _check_backoff() -> list[CheckMessage]:
    """The waits of a blocking acquire (``lock(..., timeout=...)``)."""
    errors: list[CheckMessage] = []
    base, cap = conf.BACKOFF_BASE, conf.BACKOFF_MAX
    if not is_seconds(base):
        errors.append(
            _not_seconds("DLOCK_BACKOFF_BASE", base, "0.002", check_id="django_dlock.E301")
        )
    if not is_seconds(cap):
        errors.append(_not_seconds("DLOCK_BACKOFF_MAX", cap, "0.5", check_id="django_dlock.E302"))
    if is_seconds(base) and is_seconds(cap) and base > cap:
        errors.append(
            Error(
                f"DLOCK_BACKOFF_BASE ({base!r}) is larger than DLOCK_BACKOFF_MAX ({cap!r}).",
                hint="Lower DLOCK_BACKOFF_BASE or raise DLOCK_BACKOFF_MAX.",
                id="django_dlock.E303",
            )
        )
    listen = conf.LISTEN
    if listen not in (True, False, "auto"):
        errors.append(
            Error(
                f'DLOCK_LISTEN must be True, False or "auto", not {listen!r}.',
                hint='Leave it unset ("auto": listen unless behind a connection pooler).',
                id="django_dlock.E304",
            )
        )
    return errors


def _check_resource_group() -> list[CheckMessage]:
    """The function that labels metrics and traces with a resource's group."""
    setting = conf.RESOURCE_GROUP
    if setting is None or callable(setting):
        return []
    if isinstance(setting, str):
        try:
            function = group_function(setting)
        except ImportError as error:
            problem = f"names nothing that can be imported ({error})"
        else:
            if callable(function):
                return []
            problem = "names something that is not a function"
    else:
        problem = "must be a function or its dotted path"
    return [
        Error(
            f"DLOCK_RESOURCE_GROUP {problem}: {setting!r}.",
            hint="Name a function that takes a resource name and returns its group, e.g. "
            '"myproject.locks.resource_group", or leave it unset (the part before the first ":").',
            id="django_dlock.E501",
        )
    ]


def _check_resource_groups() -> list[CheckMessage]:
    """The groups that metrics and traces tell apart by default."""
    setting = conf.RESOURCE_GROUPS
    if setting is None:
        return []
    if isinstance(setting, list | tuple | set | frozenset):
        wrong = [name for name in setting if not isinstance(name, str) or not name or ":" in name]
        if not wrong:
            return []
        problem = f"must list group names (non-empty, without ':'), not {wrong[0]!r}"
    else:
        problem = f"must be None or a list of group names, not {setting!r}"
    return [
        Error(
            f"DLOCK_RESOURCE_GROUPS {problem}.",
            hint='List the parts before the first ":" of the resource names to tell apart, '
            'e.g. ["job", "report"] (every other name is in the group "other"), or leave it '
            'unset (the part before the first ":", at most 100 groups a process).',
            id="django_dlock.E502",
        )
    ]


def _check_throttle_rates() -> list[CheckMessage]:
    """The named rates of ``throttle()``, each of which must read as a rate."""
    setting = conf.THROTTLE_RATES
    if not isinstance(setting, dict):
        problems = [f"must be a dict of names and rates, not {setting!r}."]
    else:
        problems = []
        for name, rate in setting.items():
            if not isinstance(name, str) or not name or "/" in name:
                problems.append(f"has the name {name!r}: a name is a string without '/'.")
                continue
            try:
                parse_rate(rate if isinstance(rate, str) else repr(rate))
            except InvalidArgument as error:
                problems.append(f"[{name!r}] does not read: {error.message}")
    return [
        Error(
            f"DLOCK_THROTTLE_RATES {problem}",
            hint='Write each rate as uses "/" period, e.g. {"email": "10/m", "export": "5/10m"}; '
            "the period is s, m, h or d, with an optional count.",
            id="django_dlock.E601",
        )
        for problem in problems
    ]


def _check_beat_scheduler() -> list[CheckMessage]:
    """The scheduler that ``LeaderScheduler`` wraps, when a project names one (the
    default, Celery's, is imported only by a beat, and needs Celery installed)."""
    path = getattr(settings, "DLOCK_BEAT_SCHEDULER", None)
    if path is None:
        return []
    if not isinstance(path, str) or not path:
        problem = f"must be a dotted path, not {path!r}"
    else:
        try:
            found = import_string(path.replace(":", "."))
        except ImportError as error:
            problem = f"names nothing that can be imported ({error}): {path!r}"
        else:
            if isinstance(found, type):
                return []
            problem = f"names something that is not a class: {path!r}"
    return [
        Error(
            f"DLOCK_BEAT_SCHEDULER {problem}.",
            hint='Name a Celery beat scheduler class, e.g. "celery.beat:PersistentScheduler" '
            '(the default) or "django_celery_beat.schedulers:DatabaseScheduler".',
            id="django_dlock.E702",
        )
    ]


def check_database(
    app_configs: Sequence[AppConfig] | None = None,
    databases: Sequence[str] | None = None,
    **kwargs: Any,
) -> list[CheckMessage]:
    """The lock database, as its backend checks it: its settings always, its
    server where Django lets checks query (``databases``: ``check --database``,
    ``migrate``)."""
    alias = _lock_alias()
    if alias is None:
        return []  # check_settings reports it (E004)
    vendor = connections[alias].vendor
    if vendor not in BACKENDS:
        # Its SQL cannot run there: every lock operation would fail.
        return [
            Error(
                f"DLOCK_DATABASE {alias!r} is {vendor}, which django-dlock does not "
                f"support (it supports {', '.join(sorted(BACKENDS))}).",
                hint="Point DLOCK_DATABASE at a PostgreSQL, MariaDB or SQLite database.",
                id="django_dlock.E006",
            )
        ]
    return backend_for(alias).check(databases=databases)


def _lock_alias() -> str | None:
    """``DLOCK_DATABASE`` when it names a database."""
    alias = conf.DATABASE
    return alias if isinstance(alias, str) and alias in settings.DATABASES else None
