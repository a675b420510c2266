"""The OpenAPI description of the lock API, for drf-spectacular (the ``openapi``
extra). Imported by ``views`` only when drf-spectacular is installed."""

from __future__ import annotations

from typing import Any

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
)
from rest_framework import serializers

# The serializer fields' own descriptions register themselves when imported.
from django_dlock.api import schema_extensions  # noqa: F401
from django_dlock.api.pagination import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE
from django_dlock.api.problems import PROBLEM_CONTENT_TYPE, problem_type
from django_dlock.api.serializers import (
    AcquiredSerializer,
    AcquireRequestSerializer,
    InvalidInputProblemSerializer,
    LockSerializer,
    NotAcquiredSerializer,
    OwnedLockSerializer,
    ProblemSerializer,
    ReleaseRequestSerializer,
    RenewRequestSerializer,
)
from django_dlock.validators import resource_pattern

TAG = "locks"


class LockAutoSchema(AutoSchema):
    """drf-spectacular's schema, plus what it has no decorator for: the JSON
    body of DELETE (release takes the owner in it; drf-spectacular describes
    bodies of POST, PUT and PATCH only) and the OpenAPI links from acquire and
    renew to the calls that use the lock they return. Both are added through
    ``get_operation``, drf-spectacular's public override point."""

    def get_operation(
        self, path: str, path_regex: str, path_prefix: str, method: str, registry: Any
    ) -> dict[str, Any] | None:
        operation: dict[str, Any] | None = super().get_operation(
            path, path_regex, path_prefix, method, registry
        )
        if operation is None:
            return None
        if method.upper() == "DELETE" and "requestBody" not in operation:
            serializer = self.get_request_serializer()
            if serializer is not None:
                component = self.resolve_serializer(serializer, "request")
                operation["requestBody"] = {
                    "content": {"application/json": {"schema": component.ref}},
                    "required": True,
                }
        links = LINKS.get(operation.get("operationId", ""))
        if links:
            operation["responses"]["200"]["links"] = links
        return operation


def _link(operation_id: str, description: str, with_owner: bool) -> dict[str, Any]:
    link: dict[str, Any] = {
        "operationId": operation_id,
        "parameters": {"resource": "$request.path.resource"},
        "description": description,
    }
    if with_owner:
        link["requestBody"] = {"owner": "$response.body#/owner"}
    return link


# From a call that returns a held lock to the calls that use it: the resource
# of the request, the owner of the answer.
_USE_THE_LOCK = {
    "ReadLock": _link("locks_retrieve", "Read the lock.", with_owner=False),
    "RenewLock": _link("locks_renew", "Renew the lock, as its owner.", with_owner=True),
    "ReleaseLock": _link("locks_release", "Release the lock, as its owner.", with_owner=True),
}
LINKS = {"locks_acquire": _USE_THE_LOCK, "locks_renew": _USE_THE_LOCK}


RESOURCE = OpenApiParameter(
    "resource",
    OpenApiTypes.STR,
    OpenApiParameter.PATH,
    description="The name of what is locked: 1 to 255 characters; no whitespace, "
    "control characters, invisible formatting characters (Unicode Cf), line or paragraph "
    "separators, nor '/'; in Unicode normal form NFC (which a pattern cannot express).",
    pattern=resource_pattern(),
)
PREFIX = OpenApiParameter(
    "prefix",
    OpenApiTypes.STR,
    OpenApiParameter.QUERY,
    description="Only locks whose resource starts with this (case-sensitive, on every "
    "database); it obeys the rules of a resource. Empty: every lock.",
    pattern=resource_pattern(least=0),
)
PAGE_SIZE = OpenApiParameter(
    "page_size",
    {"type": "integer", "minimum": 1, "maximum": MAX_PAGE_SIZE},
    OpenApiParameter.QUERY,
    description=f"Locks per page: {DEFAULT_PAGE_SIZE} unless given; 1 to {MAX_PAGE_SIZE}, "
    "anything else is a 400.",
)
CURSOR = OpenApiParameter(
    "cursor",
    OpenApiTypes.STR,
    OpenApiParameter.QUERY,
    description="Opaque: take it from `next` or `previous`. A cursor made up is a 400.",
)
RETRY_AFTER = OpenApiParameter(
    "Retry-After",
    {"type": "integer", "minimum": 1},
    OpenApiParameter.HEADER,
    response=[200],
    description="With acquired false: whole seconds until the holder's lock expires, or "
    "until the lock-delay of a holder that lost it ends (rounded up, by the database's "
    "clock).",
)
# Headers of the answers every operation can give.
COMMON_HEADERS = [
    OpenApiParameter(
        "Retry-After",
        {"type": "integer", "minimum": 1},
        OpenApiParameter.HEADER,
        response=[429],
        required=True,
        description="Whole seconds until the throttle lets the next call through.",
    ),
    OpenApiParameter(
        "WWW-Authenticate",
        OpenApiTypes.STR,
        OpenApiParameter.HEADER,
        response=[401],
        required=True,
        description="The authentication scheme to use, e.g. `Token`.",
    ),
    OpenApiParameter(
        "Allow",
        OpenApiTypes.STR,
        OpenApiParameter.HEADER,
        response=[405],
        required=True,
        description="The methods the route takes, e.g. `GET, POST, DELETE, OPTIONS`.",
    ),
]


def _problem(description: str, slugs: list[str], invalid: bool = False) -> OpenApiResponse:
    kinds = ", ".join(f"`{problem_type(slug)}`" for slug in slugs)
    return OpenApiResponse(
        InvalidInputProblemSerializer if invalid else ProblemSerializer,
        description=f"{description} Problem type: {kinds}.",
    )


def problem_responses(*statuses: int) -> dict[Any, Any]:
    known = {
        400: _problem(
            "Invalid input: the resource, a field of the body, a query parameter, or a "
            "malformed body; `errors` names each.",
            ["invalid-input"],
            invalid=True,
        ),
        401: _problem("Not authenticated.", ["not-authenticated"]),
        403: _problem(
            "Not authenticated (with session authentication only), or not permitted (by "
            "the permission classes, for this resource).",
            ["not-authenticated", "permission-denied"],
        ),
        404: _problem("No such route under locks/.", ["not-found"]),
        405: _problem("Method not allowed.", ["method-not-allowed"]),
        406: _problem("The Accept header allows no JSON.", ["not-acceptable"]),
        415: _problem("The body is not JSON.", ["unsupported-media-type"]),
        413: _problem(
            "The body is larger than Django's DATA_UPLOAD_MAX_MEMORY_SIZE.",
            ["request-too-large"],
        ),
        429: _problem(
            "Throttled: the scope `dlock` (every call) or `dlock-owner-failure` (failed owner "
            "checks of renew and release) of DRF's DEFAULT_THROTTLE_RATES is used up; "
            "`Retry-After` says when to try again.",
            ["throttled"],
        ),
    }
    common = [401, 403, 404, 405, 406, 429]
    return {(code, PROBLEM_CONTENT_TYPE): known[code] for code in sorted({*common, *statuses})}


def json_response(code: int, response: Any) -> dict[Any, Any]:
    return {(code, "application/json"): response}


def document(viewset: type) -> None:
    """Attach the OpenAPI description to ``LockViewSet``."""
    viewset.schema = LockAutoSchema()  # type: ignore[attr-defined]
    _extend_schema_view(
        list=extend_schema(
            operation_id="locks_list",
            summary="List unexpired locks",
            description="Locks held now, ordered by resource, one page at a time (cursor "
            "pagination: follow `next`), narrowed to those the permission classes let the caller "
            "see. `owner` is shown only to users with the `django_dlock.change_distributedlock` "
            "permission.",
            tags=[TAG],
            parameters=[PREFIX, CURSOR, PAGE_SIZE, *COMMON_HEADERS],
            responses={
                **json_response(200, LockSerializer(many=True)),
                **problem_responses(400),
            },
        ),
        retrieve=extend_schema(
            operation_id="locks_retrieve",
            summary="Read a lock",
            description="The lock on `resource` if one is held now. `owner` is shown only to "
            "users with the `django_dlock.change_distributedlock` permission.",
            tags=[TAG],
            parameters=[RESOURCE, *COMMON_HEADERS],
            responses={
                **json_response(200, LockSerializer),
                **problem_responses(400),
                (404, PROBLEM_CONTENT_TYPE): _problem(
                    "No lock is held on the resource (never acquired, released or expired), "
                    "or no such route.",
                    ["lock-not-found", "not-found"],
                ),
            },
        ),
        acquire=extend_schema(
            operation_id="locks_acquire",
            summary="Acquire a lock",
            description="Takes the lock unless others hold it in a way that excludes this "
            "call; never waits. Exclusive by default; `shared: true` holds it as one of many "
            "readers (none beside the exclusive holder, none ahead of a writer queued in "
            "lock()), `limit: N` as one of at most N permits of a semaphore. The owner that "
            "holds it gets it again with a new `expires_at` and the same fencing token "
            "(`reentrant: true`: with one hold more). Without `owner` a random 128-bit token "
            "is generated and returned. `lock_delay` (exclusive locks): if the hold is lost "
            "rather than released (it expires, or is force-released), nobody may take the "
            "resource for that many seconds after; meanwhile acquire answers `acquired: false` "
            "with the moment it becomes available as `expires_at`.",
            tags=[TAG],
            parameters=[RESOURCE, RETRY_AFTER, *COMMON_HEADERS],
            request=AcquireRequestSerializer,
            responses={
                **json_response(
                    200,
                    OpenApiResponse(
                        inline_serializer_or(AcquiredSerializer, NotAcquiredSerializer),
                        description="`acquired: true` with the lock, or `acquired: false` "
                        "with the holder's `expires_at` (while a lock-delay runs: its end) and "
                        "a `Retry-After` header.",
                    ),
                ),
                **problem_responses(400, 413, 415),
                (409, PROBLEM_CONTENT_TYPE): _problem(
                    "The resource is another kind of lock while it has holders (a semaphore "
                    "where a lock was asked for, a lock where a semaphore was, or another "
                    "limit).",
                    ["kind-mismatch"],
                ),
            },
            examples=[
                OpenApiExample(
                    "Acquire", value={"owner": "worker-1", "ttl": 30}, request_only=True
                ),
                OpenApiExample(
                    "A reader",
                    value={"ttl": 30, "shared": True, "label": "report worker 3"},
                    request_only=True,
                ),
                OpenApiExample("A permit", value={"ttl": 30, "limit": 4}, request_only=True),
                OpenApiExample(
                    "With a lock-delay",
                    value={"owner": "worker-1", "ttl": 30, "lock_delay": 10},
                    request_only=True,
                ),
            ],
        ),
        renew=extend_schema(
            operation_id="locks_renew",
            summary="Renew a lock",
            description="Extends the hold that `owner` validly has (the lock, or its reader's "
            "or permit's hold) to `ttl` seconds from now.",
            tags=[TAG],
            parameters=[RESOURCE, *COMMON_HEADERS],
            request=RenewRequestSerializer,
            responses={
                **json_response(200, OwnedLockSerializer),
                **problem_responses(400, 413, 415),
                (404, PROBLEM_CONTENT_TYPE): _problem(
                    "There is no lock (never acquired, released or purged), or no such route.",
                    ["lock-not-found", "not-found"],
                ),
                (409, PROBLEM_CONTENT_TYPE): _problem(
                    "The lock expired, or another owner holds it.", ["lock-not-held"]
                ),
            },
        ),
        release=extend_schema(
            operation_id="locks_release",
            summary="Release a lock",
            description="Gives up the hold that `owner` has: the lock, or its reader's or "
            "permit's hold. A reentrant hold loses one of its holds: 200 with the hold while "
            "holds remain, 204 at the last.",
            tags=[TAG],
            parameters=[RESOURCE, *COMMON_HEADERS],
            request=ReleaseRequestSerializer,
            responses={
                **json_response(
                    200,
                    OpenApiResponse(
                        OwnedLockSerializer, description="One hold of several released."
                    ),
                ),
                204: OpenApiResponse(description="Released."),
                **problem_responses(400, 413, 415),
                (403, PROBLEM_CONTENT_TYPE): _problem(
                    "Another owner holds the lock; or not authenticated / not permitted.",
                    ["lock-owner-mismatch", "not-authenticated", "permission-denied"],
                ),
                (404, PROBLEM_CONTENT_TYPE): _problem(
                    "No lock is held on the resource (never acquired, released or expired), "
                    "or no such route.",
                    ["lock-not-found", "not-found"],
                ),
            },
        ),
    )(viewset)


def inline_serializer_or(*choices: type[serializers.Serializer[Any]]) -> Any:
    from drf_spectacular.utils import PolymorphicProxySerializer

    return PolymorphicProxySerializer(
        component_name="AcquireResult",
        serializers=list(choices),
        resource_type_field_name=None,
    )


def _extend_schema_view(**schemas: Any) -> Any:
    """``extend_schema_view`` for any method name: it only knows DRF's own
    actions and ``@action`` methods, and acquire/release/renew are neither."""

    def decorate(viewset: type) -> type:
        for name, schema in schemas.items():
            method = getattr(viewset, name)
            setattr(viewset, name, schema(method))
        return viewset

    return decorate
