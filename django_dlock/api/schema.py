"""The OpenAPI description of the lock API, for drf-spectacular (the ``openapi``
extra). Imported by ``views`` only when drf-spectacular is installed."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
)
from rest_framework import serializers

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
from django_dlock.conf import conf
from django_dlock.validators import MAX_LENGTH

TAG = "locks"


class LockAutoSchema(AutoSchema):
    """drf-spectacular's schema, plus the JSON body of DELETE (release takes the
    owner in it), which drf-spectacular leaves out for methods other than
    POST, PUT and PATCH."""

    def _get_request_body(self, direction: str = "request") -> Any:
        if self.method != "DELETE":
            return super()._get_request_body(direction)
        self.method = "POST"
        try:
            return super()._get_request_body(direction)
        finally:
            self.method = "DELETE"


class TtlFieldExtension(OpenApiSerializerFieldExtension):  # type: ignore[no-untyped-call]
    target_class = "django_dlock.api.serializers.TtlField"

    def map_serializer_field(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        return {
            "type": "number",
            "minimum": 0,
            "exclusiveMinimum": True,
            "maximum": conf.MAX_TTL,  # read when the schema is generated
        }


class OwnerFieldExtension(OpenApiSerializerFieldExtension):  # type: ignore[no-untyped-call]
    target_class = "django_dlock.api.serializers.OwnerField"

    def map_serializer_field(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        # No NUL: PostgreSQL cannot store it in text.
        return {"type": "string", "minLength": 1, "maxLength": MAX_LENGTH, "pattern": "^[^\\x00]+$"}


class FlagFieldExtension(OpenApiSerializerFieldExtension):  # type: ignore[no-untyped-call]
    target_class = "django_dlock.api.serializers.FlagField"

    def map_serializer_field(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        return {"type": "boolean", "enum": [self.target.value]}


# Python's \s, as django_dlock.validators uses it.
_RESOURCE_CHARS = r"[^\s/\x00-\x1f\x7f-\x9f]"
RESOURCE = OpenApiParameter(
    "resource",
    OpenApiTypes.STR,
    OpenApiParameter.PATH,
    description="The name of what is locked: 1 to 255 characters, no whitespace, no "
    "control characters, no '/'.",
    pattern=rf"^{_RESOURCE_CHARS}{{1,255}}$",
)
PREFIX = OpenApiParameter(
    "prefix",
    OpenApiTypes.STR,
    OpenApiParameter.QUERY,
    description="Only locks whose resource starts with this (case-sensitive); it obeys "
    "the rules of a resource.",
    pattern=rf"^{_RESOURCE_CHARS}{{0,255}}$",
)
PAGE_SIZE = OpenApiParameter(
    "page_size",
    {"type": "integer", "minimum": 1},
    OpenApiParameter.QUERY,
    description="Locks per page: 100 unless given, at most 1000 (larger asks get 1000).",
)
CURSOR = OpenApiParameter(
    "cursor",
    OpenApiTypes.STR,
    OpenApiParameter.QUERY,
    description="Opaque: take it from `next` or `previous`. A cursor made up is a 400.",
)
RETRY_AFTER = OpenApiParameter(
    "Retry-After",
    OpenApiTypes.INT,
    OpenApiParameter.HEADER,
    response=[200],
    description="With acquired false: whole seconds until the holder's lock expires "
    "(rounded up, by the database's clock).",
)


def _problem(description: str, slugs: list[str], invalid: bool = False) -> OpenApiResponse:
    kinds = ", ".join(f"`{problem_type(slug)}`" for slug in slugs)
    return OpenApiResponse(
        InvalidInputProblemSerializer if invalid else ProblemSerializer,
        description=f"{description} Problem type: {kinds}.",
    )


def _problems(*statuses: int) -> dict[Any, Any]:
    known = {
        400: _problem(
            "Invalid input: resource, owner, ttl, prefix, cursor or a malformed body; "
            "`errors` names the fields.",
            ["invalid-input"],
            invalid=True,
        ),
        401: _problem("Not authenticated.", ["not-authenticated"]),
        403: _problem(
            "Not authenticated (with session authentication only) or not permitted.",
            ["not-authenticated", "permission-denied"],
        ),
        404: _problem("No such route under locks/.", ["not-found"]),
        405: _problem("Method not allowed.", ["method-not-allowed"]),
        406: _problem("The Accept header allows no JSON.", ["not-acceptable"]),
        415: _problem("The body is not JSON.", ["unsupported-media-type"]),
        429: _problem("Throttled (when the host configures throttling).", ["throttled"]),
    }
    common = [401, 403, 404, 405, 406, 429]
    return {(code, PROBLEM_CONTENT_TYPE): known[code] for code in sorted({*common, *statuses})}


def _json(code: int, response: Any) -> dict[Any, Any]:
    return {(code, "application/json"): response}


def document(viewset: type) -> None:
    """Attach the OpenAPI description to ``LockViewSet``."""
    viewset.schema = LockAutoSchema()  # type: ignore[attr-defined]
    _extend_schema_view(
        list=extend_schema(
            operation_id="locks_list",
            summary="List unexpired locks",
            description="Locks held now, ordered by resource, one page at a time (cursor "
            "pagination: follow `next`). `owner` is shown to staff users only.",
            tags=[TAG],
            parameters=[PREFIX, CURSOR, PAGE_SIZE],
            responses={
                **_json(200, LockSerializer(many=True)),
                **_problems(400),
            },
        ),
        retrieve=extend_schema(
            operation_id="locks_retrieve",
            summary="Read a lock",
            description="The lock on `resource` if one is held now. `owner` is shown to "
            "staff users only.",
            tags=[TAG],
            parameters=[RESOURCE],
            responses={
                **_json(200, LockSerializer),
                **_problems(400),
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
            description="Takes the lock unless another owner validly holds it; never waits. "
            "The owner that holds it gets it again with a new `expires_at` and the same "
            "fencing token. Without `owner` a random 128-bit token is generated and returned.",
            tags=[TAG],
            parameters=[RESOURCE, RETRY_AFTER],
            request=AcquireRequestSerializer,
            responses={
                **_json(
                    200,
                    OpenApiResponse(
                        inline_serializer_or(AcquiredSerializer, NotAcquiredSerializer),
                        description="`acquired: true` with the lock, or `acquired: false` "
                        "with the holder's `expires_at` and a `Retry-After` header.",
                    ),
                ),
                **_problems(400, 415),
            },
            examples=[
                OpenApiExample(
                    "Acquire", value={"owner": "worker-1", "ttl": 30}, request_only=True
                ),
            ],
        ),
        renew=extend_schema(
            operation_id="locks_renew",
            summary="Renew a lock",
            description="Extends the lock that `owner` validly holds to `ttl` seconds from now.",
            tags=[TAG],
            parameters=[RESOURCE],
            request=RenewRequestSerializer,
            responses={
                **_json(200, OwnedLockSerializer),
                **_problems(400, 415),
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
            description="Gives up the lock that `owner` holds.",
            tags=[TAG],
            parameters=[RESOURCE],
            request=ReleaseRequestSerializer,
            responses={
                204: OpenApiResponse(description="Released."),
                **_problems(400, 415),
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
            # The base of the schema extend_schema builds: ours, whatever the
            # host's DEFAULT_SCHEMA_CLASS.
            method.kwargs = {"schema": LockAutoSchema}
            setattr(viewset, name, schema(method))
        return viewset

    return decorate
