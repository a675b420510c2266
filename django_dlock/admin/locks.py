"""A read-only admin for the locks: staff browse them with their queued
waiters, force-release one or the selected ones, and purge the expired ones.
Locks are made by code, so there is no add form and no edit form.

Whether a lock is active, and how long it has left, is decided by the
database's clock, never by this server's. Owners are secrets: only users who
may see owners (``django_dlock.permissions``, the rule of the HTTP API too)
see them, or search and sort by them.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast
from weakref import WeakKeyDictionary

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.utils import quote, unquote
from django.core.exceptions import PermissionDenied
from django.db.models import (
    CharField,
    DateTimeField,
    IntegerField,
    QuerySet,
    Value,
)
from django.db.models.functions import Cast
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from django_dlock.admin.columns import OWNER, OWNER_COLUMN, ListedLock, LockColumns
from django_dlock.admin.holders import holder_table
from django_dlock.admin.purge import PurgeAdmin, non_atomic
from django_dlock.admin.status import STATUS_RANK, StatusFilter, by_status
from django_dlock.admin.waiters import waiter_count, waiter_table
from django_dlock.conf import conf
from django_dlock.humanize import ACTIVE
from django_dlock.models import DistributedLock
from django_dlock.permissions import may_see_owners
from django_dlock.rules.clock import database_now

# The database's time of each request the admin is answering (see
# LockAdmin.get_queryset); gone with the request.
_REQUEST_NOW: WeakKeyDictionary[HttpRequest, datetime] = WeakKeyDictionary()


@admin.register(DistributedLock)
class LockAdmin(LockColumns, PurgeAdmin):
    # The columns of CONTRACT.md's admin and the queued waiters, narrow enough
    # for a laptop's screen with the admin's sidebar open: the owner is cut
    # short (whole in its tooltip), whether a lock is active is an icon before
    # its time left, acquired and expires share a column. A lock's page shows
    # every field.
    list_display = (
        "resource_name",
        OWNER_COLUMN,
        "time_left",
        "acquired_and_expires",
        "fencing_token",
        "waiters",
    )
    list_filter = (StatusFilter,)
    search_fields = ("resource", OWNER)
    sortable_by = list_display
    # Active locks first, each group by expiry (soonest first).
    ordering = (by_status(STATUS_RANK, IntegerField()).asc(), "expires_at")
    list_per_page = 100
    fields = (
        "resource",
        "label",
        OWNER_COLUMN,
        "kind",
        "status",
        "acquired",
        "expires",
        "time_left",
        "lock_delay_in_words",
        "fencing_token",
    )
    readonly_fields = fields
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

    # -- owners, for those who may see them -------------------------------------

    def _without_owner(self, request: HttpRequest, names: Sequence[Any]) -> tuple[str, ...]:
        return tuple(
            n for n in names if n not in (OWNER, OWNER_COLUMN) or may_see_owners(request.user)
        )

    def get_list_display(self, request: HttpRequest) -> tuple[str, ...]:
        return self._without_owner(request, self.list_display)

    def get_search_fields(self, request: HttpRequest) -> tuple[str, ...]:
        return self._without_owner(request, self.search_fields)

    def get_sortable_by(self, request: HttpRequest) -> tuple[str, ...]:
        return self._without_owner(request, self.sortable_by)

    def get_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        return self._without_owner(request, self.fields or ())

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        return self.get_fields(request, obj)

    # -- the list --------------------------------------------------------------

    def get_queryset(self, request: HttpRequest) -> QuerySet[DistributedLock]:
        # The database time is read once per request, before the list's query, so
        # that a lock the query finds active has time left by it too.
        queryset = super().get_queryset(request)
        now = _REQUEST_NOW.get(request)
        if now is None:
            now = _REQUEST_NOW[request] = database_now(queryset.db)
        return queryset.annotate(
            lock_status=by_status({status: status for status in STATUS_RANK}, CharField()),
            # Cast: MySQL sends a bare parameter back as text, not as a datetime.
            database_now=Cast(Value(now, output_field=DateTimeField()), DateTimeField()),
            waiter_count=waiter_count(queryset.db),
        )

    # -- a lock's page -------------------------------------------------------------

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        """The lock's fields, its queued waiters, and a force-release button."""
        lock = cast("ListedLock | None", self.get_object(request, unquote(object_id)))
        context: dict[str, Any] = {}
        if lock is not None:
            may_force = lock.lock_status == ACTIVE and self.has_force_release_permission(request)
            context = {
                "holders": holder_table(
                    lock.resource,
                    lock.database_now,
                    using=conf.DATABASE,
                    show_owners=may_see_owners(request.user),
                ),
                "holder_release_url": self.admin_url("force_release", quote(lock.pk))
                if may_force
                else None,
                "waiters": waiter_table(
                    lock.resource,
                    lock.database_now,
                    using=conf.DATABASE,
                    show_owners=may_see_owners(request.user),
                ),
                "force_release_url": self.admin_url("force_release", quote(lock.pk))
                if lock.lock_status == ACTIVE and self.has_force_release_permission(request)
                else None,
            }
        return super().change_view(
            request, object_id, form_url, {**context, **(extra_context or {})}
        )

    def force_release_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Ask for confirmation, then release this one lock, whoever holds it;
        back to its page."""
        if not self.has_force_release_permission(request):
            raise PermissionDenied
        lock = cast("ListedLock | None", self.get_object(request, unquote(object_id)))
        if lock is None:  # purged meanwhile
            self.message_user(request, gettext("There is no such lock."), messages.WARNING)
            return HttpResponseRedirect(self.admin_url("changelist"))
        holder = request.POST.get("holder") or request.GET.get("holder")
        if holder and request.method == "POST":
            # One holder's hold (a reader's, a permit's), whatever its hold count.
            if DistributedLock.objects.force_release(lock.resource, owner=holder):
                self.log_change(request, lock, gettext("Force-released one holder."))
                self.message_user(request, gettext("Released one holder."), messages.SUCCESS)
            else:
                self.message_user(
                    request, gettext("That holder no longer held the lock."), messages.WARNING
                )
            return HttpResponseRedirect(self.admin_url("change", quote(lock.pk)))
        if request.method == "POST":
            self._force_release(request, [lock])
            return HttpResponseRedirect(self.admin_url("change", quote(lock.pk)))
        return self._force_release_confirmation(request, [lock], from_action=False)

    # -- actions -----------------------------------------------------------------

    @admin.action(description=_("Force-release the selected locks"), permissions=["force_release"])
    def force_release_selected(
        self, request: HttpRequest, queryset: QuerySet[ListedLock]
    ) -> HttpResponse | None:
        """Ask for confirmation, then release each selected lock whoever holds it."""
        locks = list(queryset.order_by("resource"))
        if request.POST.get("post"):
            self._force_release(request, locks)
            return None  # back to the list
        return self._force_release_confirmation(request, locks, from_action=True)

    def _force_release(self, request: HttpRequest, locks: list[ListedLock]) -> None:
        """Release each of ``locks`` through ``DistributedLock.objects.force_release``
        (its own transaction, so the next holder still gets a larger fencing
        token), and say how many were released."""
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

    def _force_release_confirmation(
        self, request: HttpRequest, locks: list[ListedLock], *, from_action: bool
    ) -> TemplateResponse:
        context = {
            **self.admin_site.each_context(request),
            "title": gettext("Force-release locks"),
            "subtitle": None,
            "opts": self.opts,
            "locks": locks,
            # Each lock as its page shows it: "shared holders" for readers or
            # permits, never the row's internal owner; times to the second.
            "rows": [
                {
                    "lock": lock,
                    "owner": self.owner_token(lock),
                    "status": self.status(lock),
                    "expires": self.expires(lock),
                }
                for lock in locks
            ],
            "active_count": sum(lock.lock_status == ACTIVE for lock in locks),
            "from_action": from_action,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "media": self.media,
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(
            request, "admin/django_dlock/distributedlock/force_release_confirmation.html", context
        )

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        urls = super().get_urls()
        for pattern in urls:
            if pattern.name == "{}_{}_changelist".format(*info):
                non_atomic(pattern.callback)  # force-release runs lock operations
        force_release = path(
            "<path:object_id>/force-release/",
            non_atomic(self.admin_site.admin_view(self.force_release_view)),
            name="{}_{}_force_release".format(*info),
        )
        return [force_release, *urls]
