"""The example project's users, edited under edit-locks: open a user's page in
two browsers (two staff users) to see the second one read-only, with a
"take over" button (docs/admin.md, Edit-locks)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib import admin
from django.contrib.auth.admin import UserAdmin
from django.contrib.auth.models import User

from django_dlock.admin import EditLockMixin

if TYPE_CHECKING:
    _UserAdminBase = UserAdmin[User]
else:
    _UserAdminBase = UserAdmin

admin.site.unregister(User)


@admin.register(User)
class LockedUserAdmin(EditLockMixin, _UserAdminBase):
    """Django's user admin, each user's page locked while someone edits it."""
