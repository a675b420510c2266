"""RFC 9457 problem details for every error of the lock API.

The viewset names ``problem_exception_handler`` as its own exception handler,
so the host project's ``EXCEPTION_HANDLER`` and its other endpoints are left
as they are.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.http import Http404
from django.utils.translation import gettext_lazy as _
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import exception_handler

PROBLEM_CONTENT_TYPE = "application/problem+json"
TYPE_PREFIX = "urn:django-dlock:problem:"

# The field name under ``errors`` for a problem with the request body as a
# whole: malformed JSON, or JSON that is not an object.
BODY_FIELD = "body"


class LockNotFound(exceptions.APIException):
    status_code = status.HTTP_404_NOT_FOUND
    default_detail = _("There is no lock on this resource.")
    default_code = "lock_not_found"


class LockNotHeld(exceptions.APIException):
    """Renewal refused: the lock expired, or another owner holds it."""

    status_code = status.HTTP_409_CONFLICT
    default_detail = _("The lock expired or is held by another owner.")
    default_code = "lock_not_held"


class LockOwnerMismatch(exceptions.APIException):
    """Release refused: another owner holds the lock."""

    status_code = status.HTTP_403_FORBIDDEN
    default_detail = _("The lock is held by another owner.")
    default_code = "lock_owner_mismatch"


class KindMismatch(exceptions.APIException):
    """Acquire refused: the resource is another kind of lock while it has
    holders (a semaphore, or another limit)."""

    status_code = status.HTTP_409_CONFLICT
    default_detail = _("The resource is another kind of lock while it has holders.")
    default_code = "kind_mismatch"


class RequestTooLarge(exceptions.APIException):
    """The body is over Django's ``DATA_UPLOAD_MAX_MEMORY_SIZE``."""

    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = _("The request body is larger than the server accepts.")
    default_code = "request_too_large"


class RouteNotFound(exceptions.NotFound):
    default_detail = _(
        "There is no such route in the lock API. A resource cannot contain '/', also not "
        "percent-encoded as %2F."
    )
    default_code = "not_found"


# (exception class, type slug, title). The first match wins, so subclasses come first.
PROBLEM_TYPES: list[tuple[type[exceptions.APIException], str, str]] = [
    (exceptions.ValidationError, "invalid-input", "Invalid input"),
    (exceptions.ParseError, "invalid-input", "Invalid input"),
    (exceptions.NotAuthenticated, "not-authenticated", "Authentication required"),
    (exceptions.AuthenticationFailed, "not-authenticated", "Authentication required"),
    (LockOwnerMismatch, "lock-owner-mismatch", "Lock held by another owner"),
    (exceptions.PermissionDenied, "permission-denied", "Permission denied"),
    (LockNotFound, "lock-not-found", "Lock not found"),
    (exceptions.NotFound, "not-found", "Not found"),
    (exceptions.MethodNotAllowed, "method-not-allowed", "Method not allowed"),
    (exceptions.NotAcceptable, "not-acceptable", "Not acceptable"),
    (LockNotHeld, "lock-not-held", "Lock not held"),
    (KindMismatch, "kind-mismatch", "Another kind of lock"),
    (RequestTooLarge, "request-too-large", "Request body too large"),
    (exceptions.UnsupportedMediaType, "unsupported-media-type", "Unsupported media type"),
    (exceptions.Throttled, "throttled", "Too many requests"),
]


def problem_type(slug: str) -> str:
    return TYPE_PREFIX + slug


def problem_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's exception handler, with each response body rewritten as a problem.

    DRF's handler still decides the status and the headers (``WWW-Authenticate``,
    ``Retry-After``) and turns ``Http404`` and Django's ``PermissionDenied`` into
    API exceptions. Anything else (a database failure) is left to Django, as DRF
    leaves it.
    """
    if isinstance(exc, RequestDataTooBig):  # request.body read past Django's limit
        exc = RequestTooLarge()
    response = exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, Http404):
        exc = RouteNotFound()
    elif not isinstance(exc, exceptions.APIException):
        exc = exceptions.PermissionDenied()  # Django's PermissionDenied
    response.data = problem_body(exc, response.status_code)
    response.content_type = PROBLEM_CONTENT_TYPE
    return response


def problem_body(exc: exceptions.APIException, status_code: int) -> dict[str, Any]:
    slug, title = "about:blank", HTTPStatus(status_code).phrase
    for cls, cls_slug, cls_title in PROBLEM_TYPES:
        if isinstance(exc, cls):
            slug, title = problem_type(cls_slug), cls_title
            break
    body: dict[str, Any] = {"type": slug, "title": title, "status": status_code}
    if isinstance(exc, exceptions.ValidationError):
        errors = _field_errors(exc.detail)
        body["detail"] = " ".join(f"{field}: {messages[0]}" for field, messages in errors.items())
        body["errors"] = errors
    elif isinstance(exc, exceptions.ParseError):
        body["detail"] = str(exc.detail)
        body["errors"] = {BODY_FIELD: [str(exc.detail)]}
    else:
        body["detail"] = str(exc.detail)
    return body


def _field_errors(detail: Any) -> dict[str, list[str]]:
    """``{field: [message, ...]}``; errors about the body as a whole go under "body"."""
    if not isinstance(detail, dict):
        return {BODY_FIELD: _messages(detail)}
    errors: dict[str, list[str]] = {}
    for field, messages in detail.items():
        name = BODY_FIELD if field == api_settings.NON_FIELD_ERRORS_KEY else str(field)
        errors.setdefault(name, []).extend(_messages(messages))
    return errors


def _messages(detail: Any) -> list[str]:
    if isinstance(detail, list | tuple):
        return [message for item in detail for message in _messages(item)]
    if isinstance(detail, dict):
        return [message for item in detail.values() for message in _messages(item)]
    return [str(detail)]
