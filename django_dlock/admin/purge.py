"""The purge of expired locks in the admin (a button above the list, a
confirmation page, then the batches of ``purge_locks``), and what the lock
admin's views share: their URLs, and staying out of ``ATOMIC_REQUESTS``."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.translation import gettext, ngettext

from django_dlock.conf import conf
from django_dlock.models import DistributedLock

if TYPE_CHECKING:
    _LockAdminBase = admin.ModelAdmin[DistributedLock]
else:
    _LockAdminBase = admin.ModelAdmin

_View = TypeVar("_View", bound=Callable[..., Any])


def non_atomic(view: _View) -> _View:
    """Keep ``view`` out of ``ATOMIC_REQUESTS`` on the locks' database: a lock
    operation refuses to run inside a transaction the caller has open."""
    return transaction.non_atomic_requests(using=conf.DATABASE)(view)


class PurgeAdmin(_LockAdminBase):
    """The purge of expired locks, for users with the model's "delete" permission."""

    def has_purge_permission(self, request: HttpRequest) -> bool:
        """Who may purge expired locks: the model's "delete" permission."""
        return request.user.has_perm(f"{self.opts.app_label}.delete_{self.opts.model_name}")

    def admin_url(self, name: str, *args: Any) -> str:
        """The URL of this admin's view ``name`` (``"changelist"``, ``"change"``...)."""
        return reverse(
            f"admin:{self.opts.app_label}_{self.opts.model_name}_{name}",
            args=args,
            current_app=self.admin_site.name,
        )

    def get_urls(self) -> list[URLPattern]:
        purge = path(
            "purge/",
            non_atomic(self.admin_site.admin_view(self.purge_view)),
            name=f"{self.opts.app_label}_{self.opts.model_name}_purge",
        )
        return [purge, *super().get_urls()]

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
        changelist_url = self.admin_url("changelist")
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
            # What the purge will delete: not a lock whose lock-delay still runs,
            # which ``expired()`` counts too.
            "expired_count": DistributedLock.objects.using(conf.DATABASE).purgeable().count(),
            "changelist_url": changelist_url,
            "media": self.media,
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(
            request, "admin/django_dlock/distributedlock/purge_confirmation.html", context
        )
