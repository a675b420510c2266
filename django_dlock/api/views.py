"""The lock API: one viewset whose routes are acquire, read, renew, release and list."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import transaction
from django.utils.html import escape
from django.utils.module_loading import import_string
from rest_framework import serializers, viewsets
from rest_framework.permissions import BasePermission
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import BaseThrottle
from rest_framework.views import APIView

from django_dlock.api.encoding import path_errors, query_parameters_not_utf8
from django_dlock.api.pagination import LockCursorPagination
from django_dlock.api.parsers import LockJSONParser
from django_dlock.api.permissions import filter_resources
from django_dlock.api.problems import (
    KindMismatch,
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
from django_dlock.api.throttling import LockCallThrottle, OwnerFailureThrottle
from django_dlock.conf import conf
from django_dlock.exceptions import LockKindMismatch
from django_dlock.models import DistributedLock, LockHold, ReleaseResult
from django_dlock.permissions import may_see_owners
from django_dlock.rules.clock import DatabaseNow, database_now, time_left
from django_dlock.service import Refusal, service_for
from django_dlock.validators import validate_resource, validate_resource_prefix

# The routes that check an owner, and the refusals that count as failed checks.
OWNER_CHECKED_ACTIONS = {"renew", "release"}
OWNER_CHECK_FAILURES = (LockNotHeld, LockOwnerMismatch)

# The query parameters the list reads (no other route reads any).
PREFIX_PARAMETER = "prefix"
LIST_QUERY_PARAMETERS = (
    PREFIX_PARAMETER,
    LockCursorPagination.cursor_query_param,
    LockCursorPagination.page_size_query_param,
)

# What OPTIONS shows as the API's description (instead of a docstring's markup).
DESCRIPTION = (
    "Distributed locks: acquire, read, renew and release a lock by its resource name, "
    "and list the locks held now. The OpenAPI schema describes every route."
)


class LockViewSet(viewsets.ViewSet):
    """Acquire, read, renew, release and list locks.

    Authentication classes are the host's DRF defaults; permission classes come
    from ``DLOCK_API_PERMISSION_CLASSES`` and are asked about each resource
    (``check_object_permissions`` with the name); throttles add the scopes of
    ``django_dlock.api.throttling`` to the host's. Every error is an RFC 9457
    problem (``django_dlock.api.problems``).
    """

    lookup_field = "resource"
    # Any resource a URL path segment can carry (periods included): the view
    # validates it, so a bad one is a 400 that names it rather than a 404.
    lookup_value_regex = "[^/]+"
    parser_classes = [LockJSONParser]
    renderer_classes = [JSONRenderer]
    pagination_class = LockCursorPagination

    @classmethod
    def as_view(  # type: ignore[override]
        cls, actions: dict[str, Any] | None = None, **initkwargs: Any
    ) -> Callable[..., Any]:
        view = super().as_view(actions, **initkwargs)
        # Lock operations refuse to run inside a caller's transaction, which
        # ATOMIC_REQUESTS would open around the view.
        for alias in settings.DATABASES:
            view = transaction.non_atomic_requests(using=alias)(view)
        return view

    def get_permissions(self) -> list[BasePermission]:
        return [import_string(path)() for path in conf.API_PERMISSION_CLASSES]

    def get_throttles(self) -> list[BaseThrottle]:
        throttles: list[BaseThrottle] = [*super().get_throttles(), LockCallThrottle()]
        if self.action in OWNER_CHECKED_ACTIONS:
            throttles.append(OwnerFailureThrottle())
        return throttles

    def get_exception_handler(self) -> Callable[..., Response | None]:
        return problem_exception_handler

    def get_view_description(self, html: bool = False) -> str:
        return escape(DESCRIPTION) if html else DESCRIPTION

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        refuse_unroutable_path(request)
        if self.action == "list":
            bad = query_parameters_not_utf8(request, LIST_QUERY_PARAMETERS)
            if bad:
                raise serializers.ValidationError(
                    {name: ["Not UTF-8 once percent-decoded."] for name in bad}
                )

    def handle_exception(self, exc: Exception) -> Response:
        if isinstance(exc, OWNER_CHECK_FAILURES):
            OwnerFailureThrottle().record_failure(self.request, self)
        return super().handle_exception(exc)

    # -- helpers ----------------------------------------------------------------

    def _resource(self) -> str:
        """The route's resource, valid and one the permission classes allow."""
        resource = self.kwargs[self.lookup_field]
        try:
            validate_resource(resource)
        except DjangoValidationError as error:
            raise serializers.ValidationError({"resource": error.messages}) from None
        self.check_object_permissions(self.request, resource)
        return str(resource)

    def _body(self, serializer_class: type[serializers.Serializer[Any]]) -> dict[str, Any]:
        serializer = serializer_class(data=self.request.data)
        serializer.is_valid(raise_exception=True)
        return dict(serializer.validated_data)

    def _locks(self) -> Any:
        return DistributedLock.objects.using(conf.DATABASE)

    # -- routes -------------------------------------------------------------------

    def list(self, request: Request) -> Response:
        prefix = request.query_params.get(PREFIX_PARAMETER, "")
        if prefix:
            try:
                validate_resource_prefix(prefix)
            except DjangoValidationError as error:
                raise serializers.ValidationError({PREFIX_PARAMETER: error.messages}) from None
        locks = self._locks().active().with_resource_prefix(prefix)
        locks = filter_resources(request, self, self.get_permissions(), locks)
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(locks, request, view=self)
        _attach_holders(page or [])
        data = LockSerializer(page, many=True, show_owner=may_see_owners(request.user)).data
        return paginator.get_paginated_response(data)

    def retrieve(self, request: Request, resource: str) -> Response:
        resource = self._resource()
        lock = self._locks().active().filter(resource=resource).first()
        if lock is None:
            raise LockNotFound()
        _attach_holders([lock])
        if lock.is_shared and not lock.shared_holders:
            raise LockNotFound()  # its last holds expired a moment ago
        return Response(LockSerializer(lock, show_owner=may_see_owners(request.user)).data)

    def acquire(self, request: Request, resource: str) -> Response:
        resource = self._resource()
        body = self._body(AcquireRequestSerializer)
        if "owner" not in body:
            body["owner"] = None  # the manager generates one with `secrets`
        try:
            taken = service_for(conf.DATABASE).acquire(resource, **body)
        except LockKindMismatch as error:
            raise KindMismatch(str(error)) from None
        if not isinstance(taken, Refusal):
            return Response(AcquiredSerializer(taken).data)
        # As the acquisition found the lock: free at the first holder's expiry,
        # or a running lock-delay's end; else now (waiters queued first).
        now = taken.now or database_now(conf.DATABASE)
        return _not_acquired(resource, taken.until or now, now)

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
        result, left = service_for(conf.DATABASE).release_showing(resource, body["owner"])
        if result is ReleaseResult.NOT_FOUND:
            raise LockNotFound()
        if result is ReleaseResult.FORBIDDEN:
            raise LockOwnerMismatch()
        if left is not None:  # decremented: the hold as the release left it
            return Response(OwnedLockSerializer(left).data)
        return Response(status=204)


def _not_acquired(resource: str, available_at: datetime, now: datetime) -> Response:
    """Acquired false: the resource is available at ``available_at`` at the
    soonest (the holder's expiry, or the end of a lock-delay), ``Retry-After``
    whole seconds from the database time ``now``."""
    wait = max(time_left(available_at, now), 1)
    data = NotAcquiredSerializer({"resource": resource, "expires_at": available_at}).data
    return Response(data, headers={"Retry-After": str(math.ceil(wait))})


def _attach_holders(locks: Any) -> None:
    """Give each lock that shared holders hold its ``shared_holders``: one
    query for all of them."""
    shared = [lock for lock in locks if lock.is_shared]
    if not shared:
        return
    holds = (
        LockHold.objects.using(conf.DATABASE)
        .filter(resource__in=[lock.resource for lock in shared], expires_at__gt=DatabaseNow())
        .order_by("acquired_at", "id")
    )
    by_resource: dict[str, list[LockHold]] = {}
    for hold in holds:
        by_resource.setdefault(hold.resource, []).append(hold)
    for lock in shared:
        lock.shared_holders = by_resource.get(lock.resource, [])


def refuse_unroutable_path(request: Request) -> None:
    """A 400 naming ``resource`` when the path is not UTF-8 or carries an
    encoded ``/`` (``django_dlock.api.encoding``), before anything is routed
    on it."""
    errors = path_errors(request)
    if errors:
        raise serializers.ValidationError({"resource": errors})


class RouteNotFoundView(APIView):
    """Any other path under ``locks/``: a 404 problem rather than Django's page."""

    authentication_classes: list[Any] = []
    permission_classes: list[Any] = []
    schema = None  # not an operation of the schema
    parser_classes = [LockJSONParser]
    renderer_classes = [JSONRenderer]

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        # "locks/a%2Fb" arrives here as "locks/a/b": where the raw path shows
        # the client sent one segment, say what is wrong with it.
        refuse_unroutable_path(request)
        raise RouteNotFound()

    def get_exception_handler(self) -> Callable[..., Response | None]:
        return problem_exception_handler


try:
    from django_dlock.api.schema import document
except ImportError:  # drf-spectacular is not installed: no schema to describe
    pass
else:
    document(LockViewSet)
