"""The per-resource hooks of the lock API's permission classes.

The viewset calls DRF's object permissions with the resource name (a ``str``)
on every route that names one, before it touches the database, and filters the
list through each permission class's ``filter_resources``. A host limits who
may lock what by listing its own class in ``DLOCK_API_PERMISSION_CLASSES``,
for example one built on :class:`ResourcePrefixPermission`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rest_framework.permissions import BasePermission
from rest_framework.request import Request

if TYPE_CHECKING:
    from django_dlock.managers import DistributedLockQuerySet
    from django_dlock.models import DistributedLock


def filter_resources(
    request: Request,
    view: Any,
    permissions: list[Any],
    locks: DistributedLockQuerySet[DistributedLock],
) -> DistributedLockQuerySet[DistributedLock]:
    """``locks`` narrowed by every permission class that defines
    ``filter_resources(request, view, queryset)``."""
    for permission in permissions:
        narrow = getattr(permission, "filter_resources", None)
        if narrow is not None:
            locks = narrow(request, view, locks)
    return locks


class ResourcePrefixPermission(BasePermission):
    """Each user may lock, read and list only the resources that start with the
    prefix :meth:`get_resource_prefix` returns for them.

    Subclass it and return a prefix per request, or ``None`` for "any resource"::

        class TenantLocks(ResourcePrefixPermission):
            def get_resource_prefix(self, request):
                return f"tenant-{request.user.tenant_id}:"
    """

    message = "You may not use locks on this resource."

    def get_resource_prefix(self, request: Request) -> str | None:
        raise NotImplementedError("Return the prefix this request's user may lock.")

    def has_object_permission(self, request: Request, view: Any, obj: Any) -> bool:
        prefix = self.get_resource_prefix(request)
        return prefix is None or str(obj).startswith(prefix)

    def filter_resources(
        self, request: Request, view: Any, queryset: DistributedLockQuerySet[DistributedLock]
    ) -> DistributedLockQuerySet[DistributedLock]:
        prefix = self.get_resource_prefix(request)
        return queryset if prefix is None else queryset.with_resource_prefix(prefix)
