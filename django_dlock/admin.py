"""A read-only admin for the locks: staff browse them, force-release the
selected ones and purge the expired ones. Locks are made by code, so there is
no add form and no edit form.

Whether a lock is active, and how long it has left, is decided by the
database's clock, never by this server's.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeAlias, TypedDict, TypeVar, cast

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import Case, CharField, DateTimeField, QuerySet, Value, When
from django.db.models.functions import Cast
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from django_dlock.backends.clock import DatabaseNow, database_now, time_left
from django_dlock.conf import conf
from django_dlock.models import DistributedLock

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations

    from django_dlock.managers import DistributedLockQuerySet

    _LockAdminBase = admin.ModelAdmin[DistributedLock]
else:
    _LockAdminBase = admin.ModelAdmin


class _ListAnnotations(TypedDict):
    """What ``LockAdmin.get_queryset`` adds to each lock."""

    lock_status: str
    database_now: datetime


# A lock as the list shows it (annotated by ``LockAdmin.get_queryset``).
_ListedLock: TypeAlias = "WithAnnotations[DistributedLock, _ListAnnotations]"

ACTIVE = "active"
EXPIRED = "expired"
RELEASED = "released"


def duration_in_words(seconds: float) -> str:
    """``seconds`` (>= 0) as one rounded-down unit a person reads: "42 s", "3 min", "5 h", "2 d"."""
    whole = int(seconds)
    if whole < 60:
        return gettext("%(count)d s") % {"count": whole}
    if whole < 60 * 60:
        return gettext("%(count)d min") % {"count": whole // 60}
    if whole < 48 * 60 * 60:
        return gettext("%(count)d h") % {"count": whole // (60 * 60)}
    return gettext("%(count)d d") % {"count": whole // (24 * 60 * 60)}


def time_left_in_words(status: str, expires_at: datetime, now: datetime) -> str:
    """ "in 42 s", "expired 3 min ago" or "released 5 s ago", from the database time ``now``."""
    left = time_left(expires_at, now)
    if status == ACTIVE:
        return gettext("in %(time)s") % {"time": duration_in_words(max(left, 0))}
    if -left < 1:  # also when the lock expired between ``now`` and the list's query
        return gettext("released just now") if status == RELEASED else gettext("expired just now")
    if status == RELEASED:
        return gettext("released %(time)s ago") % {"time": duration_in_words(-left)}
    return gettext("expired %(time)s ago") % {"time": duration_in_words(-left)}


class StatusFilter(admin.SimpleListFilter):
    """Active or expired by the database's clock (a released lock is expired)."""

    title = _("status")
    parameter_name = "status"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [(ACTIVE, _("Active")), (EXPIRED, _("Expired or released"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any] | None:
        locks = cast(
            "DistributedLockQuerySet[DistributedLock]", queryset
        )  # LockAdmin's, from the manager
        if self.value() == ACTIVE:
            return locks.active()
        if self.value() == EXPIRED:
            return locks.expired()
        return queryset


@admin.register(DistributedLock)
class LockAdmin(_LockAdminBase):
    list_display = (
        "resource",
        "owner",
        "status",
        "acquired_at",
        "expires_at",
        "time_left",
        "fencing_token",
    )
    list_filter = (StatusFilter,)
    search_fields = ("resource", "owner")
    ordering = ("expires_at",)
    sortable_by = (
        "resource",
        "owner",
        "acquired_at",
        "expires_at",
        "time_left",
        "fencing_token",
    )
    list_per_page = 100
    fields = list_display
    readonly_fields = list_display
    actions = ["force_release_selected"]

    # -- read-only: locks are made by code -----------------------------------

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # A plain DELETE would forget the row's fencing token: purge instead.
        return False

    def has_force_release_permission(self, request: HttpRequest) -> bool:
        """Who may release other owners' locks: the model's "change" permission."""
        return request.user.has_perm(f"{self.opts.app_label}.change_{self.opts.model_name}")

    def has_purge_permission(self, request: HttpRequest) -> bool:
        """Who may purge expired locks: the model's "delete" permission."""
        return request.user.has_perm(f"{self.opts.app_label}.delete_{self.opts.model_name}")

    # -- the list --------------------------------------------------------------

    def get_queryset(self, request: HttpRequest) -> QuerySet[DistributedLock]:
        # The database time is read once per request, before the list's query, so
        # that a lock the query finds active has time left by it too.
        queryset = super().get_queryset(request)
        now = getattr(request, "_dlock_database_now", None)
        if now is None:
            now = database_now(queryset.db)
            request._dlock_database_now = now  # type: ignore[attr-defined]
        return queryset.annotate(
            lock_status=Case(
                When(owner="", then=Value(RELEASED)),
                When(expires_at__gt=DatabaseNow(), then=Value(ACTIVE)),
                default=Value(EXPIRED),
                output_field=CharField(),
            ),
            # Cast: MySQL sends a bare parameter back as text, not as a datetime.
            database_now=Cast(Value(now, output_field=DateTimeField()), DateTimeField()),
        )

    @admin.display(description=_("status"))
    def status(self, lock: _ListedLock) -> str:
        labels = {
            ACTIVE: gettext("active"),
            EXPIRED: gettext("expired"),
            RELEASED: gettext("released"),
        }
        return labels[lock.lock_status]

    @admin.display(description=_("time left"), ordering="expires_at")
    def time_left(self, lock: _ListedLock) -> str:
        return time_left_in_words(lock.lock_status, lock.expires_at, lock.database_now)

    # -- actions -----------------------------------------------------------------

    @admin.action(description=_("Force-release the selected locks"), permissions=["force_release"])
    def force_release_selected(
        self, request: HttpRequest, queryset: QuerySet[_ListedLock]
    ) -> HttpResponse | None:
        """Ask for confirmation, then release each selected lock whoever holds it.

        Each goes through ``DistributedLock.objects.force_release`` (its own
        transaction), so the next holder still gets a larger fencing token.
        """
        locks = list(queryset.order_by("resource"))
        if request.POST.get("post"):
            released = 0
            for lock in locks:
                if DistributedLock.objects.force_release(lock.resource):
                    released += 1
                    # The admin's history of the lock says who released it, and when.
                    self.log_change(request, lock, gettext("Force-released."))
            self.message_user(
                request,
                ngettext("Released %(count)d lock.", "Released %(count)d locks.", released)
                % {"count": released},
                messages.SUCCESS,
            )
            if not_held := len(locks) - released:
                self.message_user(
                    request,
                    ngettext(
                        "%(count)d selected lock was not held (expired or released already).",
                        "%(count)d selected locks were not held (expired or released already).",
                        not_held,
                    )
                    % {"count": not_held},
                    messages.WARNING,
                )
            return None  # back to the list
        context = {
            **self.admin_site.each_context(request),
            "title": gettext("Force-release locks"),
            "subtitle": None,
            "opts": self.opts,
            "locks": locks,
            "active_count": sum(lock.lock_status == ACTIVE for lock in locks),
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "media": self.media,
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(
            request, "admin/django_dlock/distributedlock/force_release_confirmation.html", context
        )

    # -- purge -------------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        urls = super().get_urls()
        for pattern in urls:
            if pattern.name == "{}_{}_changelist".format(*info):
                _non_atomic(pattern.callback)  # force-release runs lock operations
        purge = path(
            "purge/",
            _non_atomic(self.admin_site.admin_view(self.purge_view)),
            name="{}_{}_purge".format(*info),
        )
        return [purge, *urls]

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        extra_context = {
            **(extra_context or {}),
            "has_purge_permission": self.has_purge_permission(request),
        }
        return super().changelist_view(request, extra_context)

    def purge_view(self, request: HttpRequest) -> HttpResponse:
        """Ask for confirmation, then delete every expired lock in batches through
        ``DistributedLock.objects.purge_expired`` (which keeps fencing tokens counting)."""
        if not self.has_purge_permission(request):
            raise PermissionDenied
        changelist_url = reverse(
            f"admin:{self.opts.app_label}_{self.opts.model_name}_changelist",
            current_app=self.admin_site.name,
        )
        if request.method == "POST":
            purged = DistributedLock.objects.purge_expired()
            self.message_user(
                request,
                ngettext(
                    "Purged %(count)d expired lock.", "Purged %(count)d expired locks.", purged
                )
                % {"count": purged},
                messages.SUCCESS,
            )
            return HttpResponseRedirect(changelist_url)
        context = {
            **self.admin_site.each_context(request),
            "title": gettext("Purge expired locks"),
            "subtitle": None,
            "opts": self.opts,
            "expired_count": DistributedLock.objects.using(conf.DATABASE).expired().count(),
            "changelist_url": changelist_url,
            "media": self.media,
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(
            request, "admin/django_dlock/distributedlock/purge_confirmation.html", context
        )


_View = TypeVar("_View", bound=Callable[..., Any])


def _non_atomic(view: _View) -> _View:
    """Keep ``view`` out of ``ATOMIC_REQUESTS`` on the locks' database: a lock
    operation refuses to run inside a transaction the caller has open."""
    return transaction.non_atomic_requests(using=conf.DATABASE)(view)
