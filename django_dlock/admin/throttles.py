"""A read-only list of throttle keys: each key's rate, its uses in the window
now and when the next use would be allowed, by the database's clock.

Uses are recorded by code (``django_dlock.throttle``), so there is no add,
edit or delete; ``purge_locks`` deletes keys whose uses all left their window.
A key is its row (``ThrottleKey``, a proxy of ``ThrottleSlot``), which keeps
the times of its last uses (``rules.throttle``): they are counted here, under
the rate of the key's last use, against the database's now read in the same
query: one query for the page, whatever the number of keys.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.db.models import QuerySet
from django.db.models.functions import Length
from django.http import HttpRequest
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from django_dlock.admin.status import moment
from django_dlock.conf import conf
from django_dlock.exceptions import InvalidArgument
from django_dlock.humanize import duration_in_words
from django_dlock.models import ThrottleKey
from django_dlock.rules.clock import DatabaseNow
from django_dlock.rules.throttle import limit_th_newest, microseconds, uses_in_window
from django_dlock.throttles.parsing import parse_rate
from django_dlock.throttles.rate import Rate

if TYPE_CHECKING:
    _ThrottleAdminBase = admin.ModelAdmin[ThrottleKey]
else:
    _ThrottleAdminBase = admin.ModelAdmin

__all__ = ["ThrottleKeyAdmin"]


def _rate(key: Any) -> Rate | None:
    """The rate of the key's last use; None when it has none (or no longer reads)."""
    try:
        return parse_rate(key.rate) if key.rate else None
    except InvalidArgument:
        return None


def _in_window(key: Any, rate: Rate | None) -> int:
    """How many of the key's kept uses lie within the last period of ``rate``."""
    if rate is None:
        return 0
    period_us = rate.period // timedelta(microseconds=1)
    return uses_in_window(key.ring, microseconds(key.database_now), period_us)


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
        return (
            super()
            .get_queryset(request)
            .using(conf.DATABASE)
            .filter(slot=0)
            # Sorting by the uses kept (those in the window are their newest).
            .annotate(database_now=DatabaseNow(), kept=Length("ring"))
        )

    # -- columns ---------------------------------------------------------------

    @admin.display(description=_("rate"))
    def rate_of_last_use(self, key: Any) -> str:
        return key.rate or "—"

    @admin.display(description=_("uses in the window"), ordering="kept")
    def uses_in_window(self, key: Any) -> int:
        return _in_window(key, _rate(key))

    @admin.display(description=_("last use"), ordering="used_at")
    def last_use(self, key: Any) -> str:
        return "—" if key.used_at is None else moment(key.used_at)

    @admin.display(description=_("next use allowed"))
    def next_use(self, key: Any) -> str:
        """ "now" while the window has room under the last use's rate, else how
        long until the oldest use it counts leaves it."""
        rate = _rate(key)
        if rate is None or _in_window(key, rate) < rate.limit:
            return gettext("now")
        frees_us = limit_th_newest(key.ring, rate.limit) + rate.period // timedelta(microseconds=1)
        seconds = (frees_us - microseconds(key.database_now)) / 1_000_000
        return gettext("in %(time)s") % {"time": duration_in_words(max(seconds, 0))}
