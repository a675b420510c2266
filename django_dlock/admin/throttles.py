"""A read-only list of throttle keys: each key's rate, its uses in the window
now and when the next use would be allowed, by the database's clock.

Uses are recorded by code (``django_dlock.throttle``), so there is no add,
edit or delete; ``purge_locks`` deletes keys whose uses all left their window.
A key is its slot 0's row (``ThrottleKey``, a proxy of ``ThrottleSlot``), its
other rows counted beside it in subqueries: one query for the page, whatever
the number of keys.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.db.models import (
    Count,
    IntegerField,
    Max,
    Min,
    OuterRef,
    QuerySet,
    Subquery,
)
from django.db.models.functions import Coalesce
from django.http import HttpRequest
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from django_dlock.admin.status import moment
from django_dlock.conf import conf
from django_dlock.exceptions import InvalidArgument
from django_dlock.humanize import duration_in_words
from django_dlock.models import ThrottleKey, ThrottleSlot
from django_dlock.rules.clock import DatabaseNow
from django_dlock.throttles.parsing import parse_rate

if TYPE_CHECKING:
    _ThrottleAdminBase = admin.ModelAdmin[ThrottleKey]
else:
    _ThrottleAdminBase = admin.ModelAdmin

__all__ = ["ThrottleKeyAdmin"]


def _of_key(column: str, aggregate: Any, **filters: Any) -> Subquery:
    """``aggregate(column)`` over the rows of each listed key (``filters`` applied)."""
    rows = (
        ThrottleSlot.objects.using(conf.DATABASE)
        .filter(key=OuterRef("key"), **filters)
        .order_by()
        .values("key")
        .annotate(value=aggregate(column))
        .values("value")
    )
    return Subquery(rows)


@admin.register(ThrottleKey)
class ThrottleKeyAdmin(_ThrottleAdminBase):
    list_display = ("key", "rate_of_last_use", "uses_in_window", "last_use", "next_use")
    # A key's page shows it as the list does, not its slot 0's row.
    fields = list_display
    readonly_fields = fields
    search_fields = ("key",)
    sortable_by = ("key", "uses_in_window", "last_use")
    ordering = ("key",)
    list_per_page = 100

    # -- read-only: uses are recorded by code ----------------------------------

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_queryset(self, request: HttpRequest) -> QuerySet[ThrottleKey]:
        now = DatabaseNow()
        last_rate = (
            ThrottleSlot.objects.using(conf.DATABASE)
            .filter(key=OuterRef("key"), used_at__isnull=False)
            .order_by("-used_at")
            .values("rate")[:1]
        )
        return (
            super()
            .get_queryset(request)
            .using(conf.DATABASE)
            .filter(slot=0)
            .annotate(
                in_window=Coalesce(
                    _of_key("pk", Count, free_at__gt=now), 0, output_field=IntegerField()
                ),
                last_used=_of_key("used_at", Max),
                window_frees_at=_of_key("free_at", Min, free_at__gt=now),
                last_rate=Subquery(last_rate),
                database_now=now,
            )
        )

    # -- columns ---------------------------------------------------------------

    @admin.display(description=_("rate"))
    def rate_of_last_use(self, key: Any) -> str:
        return key.last_rate or "—"

    @admin.display(description=_("uses in the window"), ordering="in_window")
    def uses_in_window(self, key: Any) -> int:
        return int(key.in_window)

    @admin.display(description=_("last use"), ordering="last_used")
    def last_use(self, key: Any) -> str:
        last_used: datetime | None = key.last_used
        return "—" if last_used is None else moment(last_used)

    @admin.display(description=_("next use allowed"))
    def next_use(self, key: Any) -> str:
        """ "now" while the window has room under the last use's rate, else how
        long until its oldest use leaves it."""
        try:
            limit = parse_rate(key.last_rate).limit if key.last_rate else None
        except InvalidArgument:
            limit = None
        frees_at: datetime | None = key.window_frees_at
        if limit is None or key.in_window < limit or frees_at is None:
            return gettext("now")
        seconds = (frees_at - key.database_now).total_seconds()
        return gettext("in %(time)s") % {"time": duration_in_words(max(seconds, 0))}
