"""The lock API: one viewset whose routes are the HTTP table of CONTRACT.md."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import transaction
from django.utils.module_loading import import_string
from rest_framework import pagination, serializers, viewsets
from rest_framework.exceptions import NotFound
from rest_framework.parsers import JSONParser
from rest_framework.permissions import BasePermission
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from django_dlock.api.problems import (
    LockNotFound,
    LockNotHeld,
    LockOwnerMismatch,
    RouteNotFound,
    problem_exception_handler,
)
from django_dlock.api.serializers import (
    AcquiredSerializer,
    AcquireRequestSerializer,
    LockSerializer,
    NotAcquiredSerializer,
    OwnedLockSerializer,
    ReleaseRequestSerializer,
    RenewRequestSerializer,
)
from django_dlock.backends.clock import DatabaseNow, database_now, time_left
from django_dlock.conf import conf
from django_dlock.models import DistributedLock, ReleaseResult
from django_dlock.validators import validate_resource

# How often acquire is tried again when it lost to a holder that was gone by the
# time its expiry was read (released or expired in between).
ACQUIRE_ATTEMPTS = 3


class LockCursorPagination(pagination.CursorPagination):
    """Pages of locks ordered by resource: stable while locks come and go, and no
    ``COUNT(*)`` over a large table."""

    ordering = "resource"
    page_size = 100
    page_size_query_param = "page_size"
    max_page_size = 1000

    def get_page_size(self, request: Request) -> int:
        # DRF silently ignores a page_size it cannot read; it is bad input.
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            return self.page_size
        # Digits only: int() would also take " 5", "+5" and "5_0" (and refuse
        # more than 4300 digits).
        if not re.fullmatch(r"[0-9]+", raw):
            size = 0
        else:
            size = self.max_page_size if len(raw.lstrip("0")) > 9 else int(raw)
        if size < 1:
            raise serializers.ValidationError(
                {self.page_size_query_param: ["A page size must be a whole number of 1 or more."]}
            )
        return min(size, self.max_page_size)

    def decode_cursor(self, request: Request) -> Any:
        invalid = serializers.ValidationError({self.cursor_query_param: ["Invalid cursor."]})
        try:
            cursor = super().decode_cursor(request)
        except NotFound:  # DRF answers a bad cursor with 404; it is bad input
            raise invalid from None
        # The position is a resource (the list is ordered by it); a forged one
        # could carry what the database cannot compare with (NUL on PostgreSQL).
        if cursor is not None and cursor.position is not None:
            try:
                validate_resource(cursor.position)
            except DjangoValidationError:
                raise invalid from None
        return cursor


class LockViewSet(viewsets.ViewSet):
    """Acquire, read, renew, release and list locks.

    Authentication classes are the host's DRF defaults; permission classes come
    from ``DLOCK_API_PERMISSION_CLASSES``. Every error is an RFC 9457 problem
    (``django_dlock.api.problems``).
    """

    lookup_field = "resource"
    # Any resource a URL path segment can carry (periods included): the view
    # validates it, so a bad one is a 400 that names it rather than a 404.
    lookup_value_regex = "[^/]+"
    parser_classes = [JSONParser]
    renderer_classes = [JSONRenderer]
    pagination_class = LockCursorPagination

    @classmethod
    def as_view(cls, actions: Any = None, **initkwargs: Any) -> Callable[..., Any]:
        view = super().as_view(actions, **initkwargs)
        # Lock operations refuse to run inside a caller's transaction, which
        # ATOMIC_REQUESTS would open around the view.
        for alias in settings.DATABASES:
            view = transaction.non_atomic_requests(using=alias)(view)
        return view

    def get_permissions(self) -> list[BasePermission]:
        return [import_string(path)() for path in conf.API_PERMISSION_CLASSES]

    def get_exception_handler(self) -> Callable[..., Response | None]:
        return problem_exception_handler

    # -- helpers ----------------------------------------------------------------

    def _resource(self) -> str:
        resource = self.kwargs[self.lookup_field]
        try:
            return validate_resource(resource)
        except DjangoValidationError as error:
            raise serializers.ValidationError({"resource": error.messages}) from None

    def _body(self, serializer_class: type[serializers.Serializer[Any]]) -> dict[str, Any]:
        serializer = serializer_class(data=self.request.data)
        serializer.is_valid(raise_exception=True)
        return dict(serializer.validated_data)

    def _show_owner(self) -> bool:
        return bool(getattr(self.request.user, "is_staff", False))

    def _locks(self) -> Any:
        return DistributedLock.objects.using(conf.DATABASE)

    # -- routes -------------------------------------------------------------------

    def list(self, request: Request) -> Response:
        prefix = request.query_params.get("prefix", "")
        if prefix:
            try:
                validate_resource(prefix)
            except DjangoValidationError as error:
                raise serializers.ValidationError({"prefix": error.messages}) from None
        locks = self._locks().active().with_resource_prefix(prefix)
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(locks, request, view=self)
        data = LockSerializer(page, many=True, show_owner=self._show_owner()).data
        return paginator.get_paginated_response(data)

    def retrieve(self, request: Request, resource: str) -> Response:
        resource = self._resource()
        lock = self._locks().active().filter(resource=resource).first()
        if lock is None:
            raise LockNotFound()
        return Response(LockSerializer(lock, show_owner=self._show_owner()).data)

    def acquire(self, request: Request, resource: str) -> Response:
        resource = self._resource()
        body = self._body(AcquireRequestSerializer)
        if "owner" not in body:
            body["owner"] = None  # the manager generates one with `secrets`
        for _attempt in range(ACQUIRE_ATTEMPTS):
            lock = DistributedLock.objects.acquire(resource, **body)
            if lock is not None:
                return Response(AcquiredSerializer(lock).data)
            holder = (
                self._locks()
                .filter(resource=resource)
                .annotate(db_now=DatabaseNow())
                .values("owner", "expires_at", "db_now")
                .first()
            )
            if holder is not None and holder["owner"] and holder["db_now"] < holder["expires_at"]:
                wait = time_left(holder["expires_at"], holder["db_now"])
                data = NotAcquiredSerializer(
                    {"resource": resource, "expires_at": holder["expires_at"]}
                ).data
                return Response(data, headers={"Retry-After": str(math.ceil(wait))})
        # Lost to holders that kept leaving just before they could be read.
        now = database_now(conf.DATABASE)
        data = NotAcquiredSerializer({"resource": resource, "expires_at": now}).data
        return Response(data, headers={"Retry-After": "1"})

    def renew(self, request: Request, resource: str) -> Response:
        resource = self._resource()
        body = self._body(RenewRequestSerializer)
        try:
            lock = DistributedLock.objects.renew(resource, **body)
        except DistributedLock.DoesNotExist:
            raise LockNotFound() from None
        if lock is None:
            raise LockNotHeld()
        return Response(OwnedLockSerializer(lock).data)

    def release(self, request: Request, resource: str) -> Response:
        resource = self._resource()
        body = self._body(ReleaseRequestSerializer)
        result = DistributedLock.objects.release(resource, body["owner"])
        if result is ReleaseResult.NOT_FOUND:
            raise LockNotFound()
        if result is ReleaseResult.FORBIDDEN:
            raise LockOwnerMismatch()
        return Response(status=204)


class RouteNotFoundView(APIView):
    """Any other path under ``locks/``: a 404 problem rather than Django's page."""

    authentication_classes: list[Any] = []
    permission_classes: list[Any] = []
    schema = None  # not an operation of the schema
    parser_classes = [JSONParser]
    renderer_classes = [JSONRenderer]

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        raise RouteNotFound()

    def get_exception_handler(self) -> Callable[..., Response | None]:
        return problem_exception_handler


try:
    from django_dlock.api.schema import document
except ImportError:  # drf-spectacular is not installed: no schema to describe
    pass
else:
    document(LockViewSet)
