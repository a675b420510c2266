"""Validation of what callers pass in: one function per value, shared by the
manager, the model fields and the HTTP API."""

from __future__ import annotations

import math
import re

from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

from django_dlock.conf import conf

MAX_LENGTH = 255

# Whitespace (including the Unicode kinds), control characters and "/" are refused:
# a resource travels in a URL path segment and is read by people in logs.
_FORBIDDEN_IN_RESOURCE = re.compile(r"[\s\x00-\x1f\x7f-\x9f/]")


def _storable(value: str, what: str) -> None:
    # PostgreSQL text cannot hold NUL, and a lone surrogate has no UTF-8 form:
    # either would fail in the database rather than here.
    if "\x00" in value:
        raise ValidationError(
            _("%(what)s may not contain NUL characters."), code="null", params={"what": what}
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValidationError(
            _("%(what)s must be valid Unicode text."), code="encoding", params={"what": what}
        ) from None


def validate_resource(value: object) -> str:
    """Return ``value`` if it is a valid resource name, else raise ``ValidationError``."""
    if not isinstance(value, str):
        raise ValidationError(_("A resource must be a string."), code="invalid")
    _storable(value, _("A resource"))
    if not 1 <= len(value) <= MAX_LENGTH:
        raise ValidationError(
            _("A resource must be 1 to %(max)d characters long."),
            code="length",
            params={"max": MAX_LENGTH},
        )
    if _FORBIDDEN_IN_RESOURCE.search(value):
        raise ValidationError(
            _("A resource may not contain whitespace, control characters or '/'."),
            code="invalid_characters",
        )
    return value


def validate_owner(value: object) -> str:
    """Return ``value`` if it is a valid owner token, else raise ``ValidationError``."""
    if not isinstance(value, str):
        raise ValidationError(_("An owner must be a string."), code="invalid")
    _storable(value, _("An owner"))
    if not 1 <= len(value) <= MAX_LENGTH:
        raise ValidationError(
            _("An owner must be 1 to %(max)d characters long."),
            code="length",
            params={"max": MAX_LENGTH},
        )
    return value


def validate_ttl(value: object) -> float:
    """Return ``value`` as seconds if it is a valid ttl (0 < ttl <= DLOCK_MAX_TTL)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError(_("A ttl must be a number of seconds."), code="invalid")
    max_ttl = conf.MAX_TTL
    # An int too large for a float (10**400) is out of range, not an OverflowError.
    if (isinstance(value, int) and abs(value) > 2**53) or not (
        math.isfinite(value) and 0 < value <= max_ttl
    ):
        raise ValidationError(
            _("A ttl must be greater than 0 and at most %(max)s seconds."),
            code="range",
            params={"max": max_ttl},
        )
    return float(value)
