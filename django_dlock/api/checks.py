"""``manage.py check`` for the lock API: registered by ``DjangoDlockApiConfig``
(``"django_dlock.api"`` in ``INSTALLED_APPS``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.core.checks import CheckMessage, Error
from django.utils.module_loading import import_string
from rest_framework.permissions import BasePermission, OperandHolder
from rest_framework.settings import api_settings
from rest_framework.throttling import SimpleRateThrottle

from django_dlock.api.throttling import CALL_SCOPE, OWNER_FAILURE_SCOPE
from django_dlock.conf import conf


def check_api_settings(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """``DLOCK_API_PERMISSION_CLASSES`` and the throttle rates of the lock API's scopes."""
    return [*_check_permission_classes(), *_check_throttle_rates()]


def _check_permission_classes() -> list[CheckMessage]:
    paths = conf.API_PERMISSION_CLASSES
    if not isinstance(paths, list | tuple) or not all(isinstance(p, str) for p in paths):
        return [
            Error(
                f"DLOCK_API_PERMISSION_CLASSES must be a list of dotted paths, not {paths!r}.",
                hint='For example ["rest_framework.permissions.IsAuthenticated"].',
                id="django_dlock.E101",
            )
        ]
    errors: list[CheckMessage] = []
    for path in paths:
        try:
            permission = import_string(path)
        except ImportError as error:
            errors.append(
                Error(
                    f"DLOCK_API_PERMISSION_CLASSES names {path!r}, which cannot be imported: {error}",
                    hint="Name a DRF permission class by its dotted path.",
                    id="django_dlock.E102",
                )
            )
            continue
        # OperandHolder: a class composed with &, | or ~ (IsAuthenticated & IsAdminUser).
        if not isinstance(permission, OperandHolder) and not (
            isinstance(permission, type) and issubclass(permission, BasePermission)
        ):
            errors.append(
                Error(
                    f"DLOCK_API_PERMISSION_CLASSES names {path!r}, which is not a DRF "
                    "permission class.",
                    hint="Name subclasses of rest_framework.permissions.BasePermission.",
                    id="django_dlock.E103",
                )
            )
    return errors


def _check_throttle_rates() -> list[CheckMessage]:
    rates = api_settings.DEFAULT_THROTTLE_RATES or {}
    errors: list[CheckMessage] = []
    for scope in (CALL_SCOPE, OWNER_FAILURE_SCOPE):
        rate = rates.get(scope)
        if rate is None:
            continue  # not throttled
        if not _parses(rate):
            errors.append(
                Error(
                    f"REST_FRAMEWORK['DEFAULT_THROTTLE_RATES'][{scope!r}] is {rate!r}, which "
                    "is not a DRF rate.",
                    hint='Write "number/period" with a period of s, m, h or d, e.g. "100/min".',
                    id="django_dlock.E104",
                )
            )
    return errors


def _parses(rate: object) -> bool:
    """Whether DRF's throttles can read ``rate`` (they would raise at each request)."""
    if not isinstance(rate, str):
        return False

    class Probe(SimpleRateThrottle):
        pass

    Probe.rate = rate
    try:
        Probe()
    except (ValueError, KeyError, IndexError):
        return False
    return True
