"""A lock's status in the admin's list, by the database's clock: active,
delayed (its holder's lock-delay runs), expired or released; the filter and the default order that use it, and how the
admin shows a moment."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from django.contrib import admin
from django.db.models import Case, Field, Q, QuerySet, Value, When
from django.http import HttpRequest
from django.utils.formats import localize
from django.utils.html import format_html
from django.utils.timezone import localtime
from django.utils.translation import gettext_lazy as _

from django_dlock.humanize import ACTIVE, DELAYED, EXPIRED, RELEASED
from django_dlock.managers import delay_runs_q
from django_dlock.rules.clock import DatabaseNow

if TYPE_CHECKING:
    from django_dlock.managers import DistributedLockQuerySet
    from django_dlock.models import DistributedLock

__all__ = ["STATUS_RANK", "StatusFilter", "by_status", "moment"]

# The list's default order: the locks held now first, then those a lock-delay
# keeps from everyone.
STATUS_RANK = {ACTIVE: 0, DELAYED: 1, EXPIRED: 2, RELEASED: 3}


def by_status(values: Mapping[str, Any], output_field: Field[Any, Any]) -> Case:
    """``values[status]`` of each lock's status by the database's clock."""
    return Case(
        When(~Q(owner="") & Q(expires_at__gt=DatabaseNow()), then=Value(values[ACTIVE])),
        When(delay_runs_q(), then=Value(values[DELAYED])),
        When(owner="", then=Value(values[RELEASED])),
        default=Value(values[EXPIRED]),
        output_field=output_field,
    )


def moment(value: datetime) -> str:
    """``value`` as the admin shows it, in lists and on pages alike: its ISO
    date and time of day, to the second, in the current time zone; the
    localized whole in its tooltip."""
    local = localtime(value)
    return format_html(
        '<time datetime="{}" title="{}">{} {}</time>',
        value.isoformat(),
        localize(local),
        f"{local:%Y-%m-%d}",
        f"{local:%H:%M:%S}",
    )


class StatusFilter(admin.SimpleListFilter):
    """Active, delayed or expired by the database's clock (a released lock is
    expired; a delayed one, expired or force-released while its holder's
    lock-delay runs, is only delayed)."""

    title = _("status")
    parameter_name = "status"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [
            (ACTIVE, _("Active")),
            (DELAYED, _("Delayed (lock-delay)")),
            (EXPIRED, _("Expired or released")),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any] | None:
        locks = cast(
            "DistributedLockQuerySet[DistributedLock]", queryset
        )  # LockAdmin's, from the manager
        if self.value() == ACTIVE:
            return locks.active()
        if self.value() == DELAYED:
            return locks.delayed()
        if self.value() == EXPIRED:
            return locks.expired().exclude(delay_runs_q())
        return queryset
