"""How the lock admin shows a lock: the columns of its list and the fields of
its page, from a lock annotated by ``LockAdmin.get_queryset`` (its status and
the database's time, both by the database's clock)."""

from __future__ import annotations

import re
from datetime import datetime
from typing import TYPE_CHECKING, TypeAlias, TypedDict

from django.contrib import admin
from django.templatetags.static import static
from django.utils.formats import localize
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.timezone import localtime
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from django_dlock.admin.status import moment
from django_dlock.humanize import (
    ACTIVE,
    DELAYED,
    EXPIRED,
    RELEASED,
    duration_in_words,
    kind_in_words,
    time_left_in_words,
)
from django_dlock.models import DistributedLock

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations

    _ColumnsBase = admin.ModelAdmin[DistributedLock]
else:
    _ColumnsBase = object

__all__ = ["OWNER", "OWNER_COLUMN", "LockColumns", "ListedLock"]


class _ListAnnotations(TypedDict):
    """What ``LockAdmin.get_queryset`` adds to each lock."""

    lock_status: str
    database_now: datetime
    waiter_count: int


# A lock as the list shows it (annotated by ``LockAdmin.get_queryset``).
ListedLock: TypeAlias = "WithAnnotations[DistributedLock, _ListAnnotations]"

OWNER = "owner"
# The list's owner column: shortened to fit, whole in its tooltip.
OWNER_COLUMN = "owner_token"

# Where a resource name may wrap: after its separators, never inside a word.
_AFTER_SEPARATOR = re.compile(r"(?<=[:._-])")


class LockColumns(_ColumnsBase):
    """The columns of ``LockAdmin``'s list and the fields of a lock's page."""

    @admin.display(description=_("resource"), ordering="resource")
    def resource_name(self, lock: ListedLock) -> SafeString:
        """The name, wrapping only after a separator (``:`` ``.`` ``-`` ``_``)."""
        *pieces, last = _AFTER_SEPARATOR.split(lock.resource)
        breakable = format_html_join("", "{}<wbr>", ((piece,) for piece in pieces))
        return format_html("{}{}", breakable, last)

    @admin.display(description=_("status"))
    def status(self, lock: ListedLock) -> str:
        labels = {
            ACTIVE: gettext("active"),
            DELAYED: gettext("delayed"),
            EXPIRED: gettext("expired"),
            RELEASED: gettext("released"),
        }
        return labels[lock.lock_status]

    @admin.display(description=_("owner"), ordering=OWNER)
    def owner_token(self, lock: ListedLock) -> str:
        if lock.is_released:
            return self.get_empty_value_display()
        if lock.is_shared:  # its holders each have an owner of their own
            return gettext("shared holders")
        return format_html('<span class="dlock-owner" title="{}">{}</span>', lock.owner, lock.owner)

    @admin.display(description=_("kind"))
    def kind(self, lock: ListedLock) -> str:
        return kind_in_words(lock.mode, lock.limit, lock.hold_count)

    @admin.display(description=_("acquired at"), ordering="acquired_at")
    def acquired(self, lock: ListedLock) -> str:
        return moment(lock.acquired_at)

    @admin.display(description=_("expires at"), ordering="expires_at")
    def expires(self, lock: ListedLock) -> str:
        return moment(lock.expires_at)

    @admin.display(description=_("acquired / expires"), ordering="acquired_at")
    def acquired_and_expires(self, lock: ListedLock) -> str:
        """Both moments in one column, one over the other (the list fits a
        laptop's screen that way)."""
        return format_html("{}<br>{}", moment(lock.acquired_at), moment(lock.expires_at))

    @admin.display(description=_("time left"), ordering="expires_at")
    def time_left(self, lock: ListedLock) -> str:
        """Until it expires; while its holder's lock-delay runs, until it is
        available (its tooltip: that moment). A yes/no icon before it says
        whether the lock is active; the words say it too, so the icon has no
        text of its own."""
        delayed = lock.lock_status == DELAYED and lock.available_at is not None
        until = lock.available_at if delayed else lock.expires_at
        icon = "yes" if lock.lock_status == ACTIVE else "no"
        return format_html(
            '<img class="dlock-status" src="{}" alt=""><span title="{}">{}</span>',
            static(f"admin/img/icon-{icon}.svg"),
            localize(localtime(until)),
            time_left_in_words(
                lock.lock_status, lock.expires_at, lock.database_now, lock.available_at
            ),
        )

    @admin.display(description=_("lock delay"), ordering="lock_delay")
    def lock_delay_in_words(self, lock: ListedLock) -> str:
        """How long the resource stays refused to everyone after its holder
        loses it (expires, or is force-released); none after a release."""
        if lock.lock_delay is None:
            return self.get_empty_value_display()
        return duration_in_words(lock.lock_delay.total_seconds())

    @admin.display(description=_("waiters"), ordering="waiter_count")
    def waiters(self, lock: ListedLock) -> int:
        """Live ``lock()`` waiters queued for the resource."""
        return lock.waiter_count
