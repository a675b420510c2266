"""The test app's admin: products edited under edit-locks (tests/test_admin_edit_lock*.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin

from django_dlock.admin import EditLockMixin
from tests.testapp.models import Product

if TYPE_CHECKING:
    _ProductAdminBase = admin.ModelAdmin[Product]
else:
    _ProductAdminBase = admin.ModelAdmin


@admin.register(Product)
class ProductAdmin(EditLockMixin, _ProductAdminBase):
    list_display: Any = ("sku", "stock")
    fields = ("sku", "stock")
