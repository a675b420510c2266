"""Edit-locks for any ``ModelAdmin``: ``EditLockMixin``.

Opening an object's change page takes its edit-lock for the user; the page
renews it every third of ``DLOCK_ADMIN_EDIT_TTL`` (``django_dlock/edit_lock.js``)
and releases it when left; a save releases it. A second editor sees the page
read-only, who edits since when, and (with the change permission) a "take
over" button. A save whose lock was lost is refused and writes nothing.

Every lock operation runs before or after Django's change view, never inside
the transaction that view opens (a lock operation refuses to join a
transaction of the caller's), and the views are kept out of ``ATOMIC_REQUESTS``.
The save itself runs inside ``held.atomic()`` of the edit-lock, where the model
lives in the lock's database: a take-over cannot land between the check and
the commit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.contrib.admin.utils import quote, unquote
from django.core.exceptions import PermissionDenied
from django.db.models import Model
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseBase,
    HttpResponseRedirect,
    JsonResponse,
)
from django.template.loader import get_template, select_template
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.translation import gettext
from django.views.decorators.http import require_POST

from django_dlock.admin.editing import EditLock, Editor, token_of
from django_dlock.admin.purge import non_atomic
from django_dlock.conf import conf
from django_dlock.exceptions import LockLost

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[Any]
else:
    _ModelAdmin = admin.ModelAdmin

__all__ = ["TOKEN_FIELD", "EditLockMixin"]

# The change form's field that carries the page's fencing token.
TOKEN_FIELD = "_dlock_edit_token"  # noqa: S105 - a form field's name
# Where a request keeps what its change page is to show (read by the permission
# checks and the rendering that Django's change view calls).
_STATE = "_dlock_edit_lock"


@dataclass(frozen=True)
class _PageState:
    pk: Any
    token: int | None  # None: another user holds the lock; the page is read-only
    holder: Editor | None


class EditLockMixin(_ModelAdmin):
    """Mix into a ``ModelAdmin`` (before it) to lock each object while a user edits it."""

    edit_lock_template = "admin/django_dlock/edit_lock/change_form.html"

    def has_edit_lock(self, request: HttpRequest, obj: Model) -> bool:
        """Whether ``request``'s page of ``obj`` holds the edit-lock (editable)."""
        state = getattr(request, _STATE, None)
        return state is None or state.pk != obj.pk or state.token is not None

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # A page that another user's lock makes read-only is rendered as Django
        # renders it for a user with the view permission only.
        if obj is not None and not self.has_edit_lock(request, obj):
            return False
        return super().has_change_permission(request, obj)

    def may_take_over(self, request: HttpRequest, obj: Model) -> bool:
        """Who may take an edit-lock from its holder: users with the change permission."""
        return super().has_change_permission(request, obj)

    def get_inline_instances(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        inlines = super().get_inline_instances(request, obj)
        if obj is not None and not self.has_edit_lock(request, obj):
            for inline in inlines:  # read-only, as the object is
                for permission in ("add", "change", "delete"):
                    setattr(inline, f"has_{permission}_permission", _never)
        return inlines

    # -- the change page ---------------------------------------------------------

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        obj = self.get_object(request, unquote(object_id))
        if obj is None or not super().has_change_permission(request, obj):
            # Nothing to lock: Django answers (not found, or a view-only page).
            return super().change_view(request, object_id, form_url, extra_context)
        edit = EditLock(obj, request.user)
        if request.method == "POST":
            token = token_of(request.POST.get(TOKEN_FIELD))
            hold = None if token is None else edit.keep(token)
            if token is None or hold is None:
                return self._not_saved(request, edit)
            setattr(request, _STATE, _PageState(obj.pk, token, None))
            try:
                with edit.guard(hold, self.model):
                    response = super().change_view(request, object_id, form_url, extra_context)
            except LockLost:  # taken over since keep(): the save rolled back
                return self._not_saved(request, edit)
            if response.status_code in (301, 302, 303):  # saved (a form with errors is 200)
                edit.give_up(token)
            return response
        token, holder = edit.take(), None
        if token is None:
            holder = edit.holder()
            if holder is None:  # released in between: try once more
                token = edit.take()
                holder = None if token is not None else edit.holder()
        setattr(request, _STATE, _PageState(obj.pk, token, holder))
        return super().change_view(request, object_id, form_url, extra_context)

    def _not_saved(self, request: HttpRequest, edit: EditLock) -> HttpResponse:
        self.message_user(request, _not_saved(edit.holder()), messages.ERROR)
        return HttpResponseRedirect(request.get_full_path())

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: Any = None,
    ) -> HttpResponse:
        response = super().render_change_form(request, context, add, change, form_url, obj)
        state: _PageState | None = getattr(request, _STATE, None)
        if add or obj is None or state is None or state.pk != obj.pk:
            return response
        if not isinstance(response, TemplateResponse) or response.context_data is None:
            return response  # a host's render_change_form that renders itself
        names = response.template_name
        # The page extends the template Django chose (the host's own, if any).
        if isinstance(names, str):
            parent: Any = get_template(names)
        elif isinstance(names, list | tuple):
            parent = select_template(names)
        else:
            parent = names
        response.template_name = self.edit_lock_template
        response.context_data.update(
            dlock_parent_template=parent, edit_lock=self._page_context(request, obj, state)
        )
        if state.token is None:
            response.context_data["show_delete"] = False
        return response

    def _page_context(self, request: HttpRequest, obj: Model, state: _PageState) -> dict[str, Any]:
        pk = obj.pk
        if state.token is not None:
            return {
                "token": state.token,
                "field": TOKEN_FIELD,
                "renew_url": self._edit_lock_url("renew", pk),
                "release_url": self._edit_lock_url("release", pk),
                # The page renews every third of the ttl (in milliseconds).
                "renew_every": round(conf.ADMIN_EDIT_TTL * 1000 / 3),
            }
        holder = state.holder.describe() if state.holder else None
        return {
            "holder": holder,
            "take_over_url": self._edit_lock_url("take_over", pk)
            if self.may_take_over(request, obj)
            else None,
        }

    # -- the page's requests -------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        urls = super().get_urls()
        info = self.opts.app_label, self.opts.model_name
        for pattern in urls:
            if pattern.name == "{}_{}_change".format(*info):
                non_atomic(pattern.callback)  # the change view runs lock operations
        views = {
            "renew": self.edit_lock_renew_view,
            "release": self.edit_lock_release_view,
            "take_over": self.edit_lock_take_over_view,
        }
        return [
            path(
                f"<path:object_id>/edit-lock/{name.replace('_', '-')}/",
                non_atomic(self.admin_site.admin_view(require_POST(view))),
                name="{}_{}_edit_lock_{}".format(*info, name),
            )
            for name, view in views.items()
        ] + urls

    def _edit_lock_url(self, name: str, pk: Any) -> str:
        info = self.opts.app_label, self.opts.model_name
        return reverse(
            "admin:{}_{}_edit_lock_{}".format(*info, name),
            args=[quote(pk)],
            current_app=self.admin_site.name,
        )

    def _edit_lock_of(self, request: HttpRequest, object_id: str) -> tuple[Model, EditLock]:
        """The object and its edit-lock, for a user who may change it (else 404/403)."""
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
            raise Http404
        if not super().has_change_permission(request, obj):
            raise PermissionDenied
        return obj, EditLock(obj, request.user)

    def edit_lock_renew_view(self, request: HttpRequest, object_id: str) -> HttpResponseBase:
        """The open page's renewal: {"state": "held"}, or {"state": "lost", "message"}."""
        _, edit = self._edit_lock_of(request, object_id)
        token = token_of(request.POST.get("token"))
        if token is not None and edit.keep(token):
            return JsonResponse({"state": "held"})
        return JsonResponse({"state": "lost", "message": _lost(edit.holder())})

    def edit_lock_release_view(self, request: HttpRequest, object_id: str) -> HttpResponseBase:
        """The page is left: release its lock (only if it still holds it)."""
        _, edit = self._edit_lock_of(request, object_id)
        token = token_of(request.POST.get("token"))
        released = token is not None and edit.give_up(token)
        return JsonResponse({"released": released})

    def edit_lock_take_over_view(self, request: HttpRequest, object_id: str) -> HttpResponseBase:
        """Take the edit-lock from its holder; back to the (now editable) change page."""
        obj, edit = self._edit_lock_of(request, object_id)
        if edit.take_over() is None:
            self.message_user(request, _not_taken(edit.holder()), messages.ERROR)
        else:
            self.message_user(request, gettext("You took over editing."), messages.SUCCESS)
        info = self.opts.app_label, self.opts.model_name
        return HttpResponseRedirect(
            reverse(
                "admin:{}_{}_change".format(*info),
                args=[quote(obj.pk)],
                current_app=self.admin_site.name,
            )
        )


def _never(*args: Any, **kwargs: Any) -> bool:
    return False


def _lost(holder: Editor | None) -> str:
    if holder is not None and holder.mine:
        return (
            gettext(
                "You opened this page again at %(time)s: this page can no longer be saved. "
                "Copy your changes before you leave it."
            )
            % holder.describe()
        )
    if holder is None:
        return gettext(
            "Your edit-lock ran out: this page can no longer be saved. "
            "Copy your changes, then reload the page."
        )
    return (
        gettext(
            "%(label)s took over editing at %(time)s: this page can no longer be saved. "
            "Copy your changes before you leave it."
        )
        % holder.describe()
    )


def _not_saved(holder: Editor | None) -> str:
    if holder is not None and holder.mine:
        return (
            gettext("Not saved: you opened this page again at %(time)s. Nothing was changed.")
            % holder.describe()
        )
    if holder is None:
        return gettext("Not saved: your edit-lock ran out. Nothing was changed.")
    return (
        gettext("Not saved: %(label)s took over editing at %(time)s. Nothing was changed.")
        % holder.describe()
    )


def _not_taken(holder: Editor | None) -> str:
    label = holder.label if holder else gettext("another user")
    return gettext("%(label)s took the edit-lock first.") % {"label": label}
