"""The OpenAPI description of the throttle API (``throttles``), for
drf-spectacular. Imported by ``throttles`` only when it is installed."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema

from django_dlock.api.problems import PROBLEM_CONTENT_TYPE, problem_type
from django_dlock.api.schema import COMMON_HEADERS, json_response, problem_responses
from django_dlock.api.schema_extensions import InvalidInputErrorsExtension
from django_dlock.validators import resource_pattern

TAG = "throttles"

KEY = OpenApiParameter(
    "key",
    {"type": "string", "pattern": resource_pattern()},
    OpenApiParameter.PATH,
    description="The throttle key, e.g. `email:42`: the rules of a resource name.",
)
RETRY_AFTER = OpenApiParameter(
    "Retry-After",
    {"type": "integer", "minimum": 1},
    OpenApiParameter.HEADER,
    response=[200],
    description="With granted false: whole seconds until a use would be granted again "
    "(rounded up, by the database's clock).",
)


class ThrottleInvalidInputErrorsExtension(InvalidInputErrorsExtension):  # type: ignore[no-untyped-call]
    """``errors`` of an invalid throttle use names no input but those listed."""

    target_class = "django_dlock.api.throttles.ThrottleInvalidInputErrorsSerializer"


def document(view: type, *, request: type, response: type, invalid_input: type) -> None:
    """Describe ``view``'s POST in the schema: its ``request`` and ``response``
    serializers, and that of its invalid-input problem."""
    invalid = OpenApiResponse(
        invalid_input,
        description="Invalid input: the key, the rate, or a malformed body; `errors` names "
        f"each. Problem type: `{problem_type('invalid-input')}`.",
    )

    decorate: Any = extend_schema(
        operation_id="throttles_use",
        tags=[TAG],
        summary="Use a throttle key",
        description="Records a use of the key when the rate allows one now (`granted` true); "
        "else `granted` is false and `retry_after` (and the `Retry-After` header) says when "
        "a use would be granted again. At most N uses of a key in any period, decided by "
        "the database.",
        parameters=[KEY, RETRY_AFTER, *COMMON_HEADERS],
        request=request,
        responses={
            **json_response(200, response),
            **problem_responses(413, 415),
            (400, PROBLEM_CONTENT_TYPE): invalid,
        },
    )
    view.post = decorate(view.post)  # type: ignore[attr-defined]
