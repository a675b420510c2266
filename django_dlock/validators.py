"""Validation of what callers pass in: one function per value, shared by the
manager, the model fields, ``purge_locks`` and the HTTP API. Each raises
``InvalidArgument``, a ``ValidationError`` that is also a ``ValueError``."""

from __future__ import annotations

import math
import re
import sys
import unicodedata
from collections.abc import Callable
from datetime import timedelta
from functools import cache
from typing import TypeGuard

from django.utils.functional import Promise
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, gettext_noop

from django_dlock.conf import conf
from django_dlock.exceptions import InvalidArgument

MAX_LENGTH = 255

# The owner a resource's row shows while shared holders hold it (the same as
# ``django_dlock.rules.SHARED_HOLDERS``, which imports this module).
RESERVED_OWNER = "django-dlock:shared-holders"

# Unicode general categories refused in a resource name: control characters,
# invisible format characters (zero-width space, bidirectional overrides, the
# byte order mark) and line and paragraph separators. Names that differ only by
# them look identical in the admin and in logs.
FORBIDDEN_CATEGORIES = {
    "Cc": gettext_noop("control characters"),
    "Cf": gettext_noop("invisible formatting characters"),
    "Zl": gettext_noop("line separators"),
    "Zp": gettext_noop("paragraph separators"),
}


def _storable(value: str, what: str | Promise) -> None:
    # PostgreSQL text cannot hold NUL, and a lone surrogate has no UTF-8 form:
    # either would fail in the database rather than here.
    if "\x00" in value:
        raise InvalidArgument(
            _("%(what)s may not contain NUL characters."), code="null", params={"what": what}
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument(
            _("%(what)s must be valid Unicode text."), code="encoding", params={"what": what}
        ) from None


# A printable ASCII name without space or "/" passes every rule below (and is
# NFC): the common case, checked without a look at each character.
_PLAIN_ASCII_NAME = re.compile(rf"[!-.0-~]{{1,{MAX_LENGTH}}}")
# The subjects of the messages, translated only when a message is made.
A_RESOURCE = gettext_lazy("A resource")
A_PREFIX = gettext_lazy("A prefix")
A_LABEL = gettext_lazy("A label")
A_THROTTLE_KEY = gettext_lazy("A throttle key")
AN_OWNER = gettext_lazy("An owner")


def _describe(char: str) -> str:
    """``U+200B ZERO WIDTH SPACE``: how a message names a character."""
    return f"U+{ord(char):04X} {unicodedata.name(char, 'unnamed character')}"


def _check_visible(value: str, what: str | Promise) -> None:
    """The rule of text that people read and tell apart (a resource name, a
    holder's label): no control or invisible formatting characters (bidirectional
    overrides, zero-width spaces), no line or paragraph separators, and Unicode
    normal form NFC. ``what`` is the subject of the messages ("A resource")."""
    # Printable ASCII has none of those characters and is NFC: the common case.
    if value.isascii() and value.isprintable():
        return
    for char in value:
        kind = FORBIDDEN_CATEGORIES.get(unicodedata.category(char))
        if kind is not None:
            raise InvalidArgument(
                _(
                    "%(what)s may not contain %(kind)s (%(char)s): names that differ only "
                    "by them look the same."
                ),
                code="invisible_characters",
                params={"what": what, "kind": _(kind), "char": _describe(char)},
            )
    if not unicodedata.is_normalized("NFC", value):
        raise InvalidArgument(
            _(
                "%(what)s must be in Unicode normal form NFC (for example 'é' as one "
                "character, not 'e' and a combining accent), so that names that look the "
                "same are the same name: pass unicodedata.normalize('NFC', name)."
            ),
            code="not_nfc",
            params={"what": what},
        )


def _check_name(value: object, what: str | Promise) -> str:
    """The rules of a resource name, for a resource or the start of one (a prefix).

    ``what`` is the subject of the messages ("A resource", "A prefix").
    """
    if isinstance(value, str) and _PLAIN_ASCII_NAME.fullmatch(value):
        return value
    if not isinstance(value, str):
        raise InvalidArgument(
            _("%(what)s must be a string."), code="invalid", params={"what": what}
        )
    _storable(value, what)
    if not 1 <= len(value) <= MAX_LENGTH:
        raise InvalidArgument(
            _("%(what)s must be 1 to %(max)d characters long."),
            code="length",
            params={"what": what, "max": MAX_LENGTH},
        )
    _check_visible(value, what)
    for char in value:
        if char.isspace():
            raise InvalidArgument(
                _("%(what)s may not contain whitespace (%(char)s)."),
                code="whitespace",
                params={"what": what, "char": _describe(char)},
            )
        if char == "/":
            raise InvalidArgument(
                _("%(what)s may not contain '/': it travels in one URL path segment."),
                code="slash",
                params={"what": what},
            )
    return value


def validate_resource(value: object) -> str:
    """Return ``value`` if it is a valid resource name, else raise ``ValidationError``.

    1 to 255 characters; no whitespace, control characters, invisible
    formatting characters (Unicode Cf), line or paragraph separators, nor "/";
    in Unicode normal form NFC.
    """
    if isinstance(value, str) and _PLAIN_ASCII_NAME.fullmatch(value):  # (without a call more)
        return value
    return _check_name(value, A_RESOURCE)


def validate_throttle_key(value: object) -> str:
    """Return ``value`` if it is a valid throttle key, else raise
    ``InvalidArgument``: the rules of a resource name (``validate_resource``)."""
    return _check_name(value, A_THROTTLE_KEY)


def validate_resource_prefix(value: object) -> str:
    """Return ``value`` if it can start a resource name, else raise
    ``ValidationError``: the rules of a resource, in messages that name the prefix."""
    return _check_name(value, A_PREFIX)


@cache
def resource_character_class() -> str:
    """A regular expression class (``[^...]``) of the characters a resource may
    contain, for the OpenAPI schema (see ``_character_class``)."""
    return _character_class(
        lambda char: (
            unicodedata.category(char) in FORBIDDEN_CATEGORIES or char.isspace() or char == "/"
        )
    )


def resource_pattern(*, least: int = 1) -> str:
    """The OpenAPI pattern of a resource name, and of what obeys its rules (a
    throttle key; a prefix, with ``least=0``): anchored, with the lengths in
    it. A schema's pattern matches anywhere in a value unless anchored, and
    tools that fold a ``maxLength`` into a pattern write its characters
    outside the class; so the length is the pattern's only."""
    return f"^{resource_character_class()}{{{least},{MAX_LENGTH}}}$"


@cache
def label_character_class() -> str:
    """A regular expression class (``[^...]``) of the characters a label may
    contain, for the OpenAPI schema (see ``_character_class``)."""
    return _character_class(lambda char: unicodedata.category(char) in FORBIDDEN_CATEGORIES)


def _character_class(refuses: Callable[[str], bool]) -> str:
    """A regular expression class (``[^...]``) of the characters that ``refuses``
    does not refuse: Python's ``re``, ECMAScript and Rust's ``regex`` read it alike
    (astral characters are written as themselves; surrogates, which no valid
    UTF-8 carries, are left out because an escaped one is an error to Rust). NFC
    is a rule about whole names, which no character class can express."""
    refused = [code for code in range(sys.maxunicode + 1) if refuses(chr(code))]
    ranges: list[tuple[int, int]] = []
    for code in refused:
        if ranges and ranges[-1][1] == code - 1:
            ranges[-1] = (ranges[-1][0], code)
        else:
            ranges.append((code, code))

    def char(code: int) -> str:
        return f"\\u{code:04x}" if code <= 0xFFFF else chr(code)

    parts = [char(a) if a == b else f"{char(a)}-{char(b)}" for a, b in ranges]
    return "[^" + "".join(parts) + "]"


def validate_owner(value: object) -> str:
    """Return ``value`` if it is a valid owner token, else raise ``ValidationError``."""
    if not isinstance(value, str):
        raise InvalidArgument(_("An owner must be a string."), code="invalid")
    _storable(value, AN_OWNER)
    if not 1 <= len(value) <= MAX_LENGTH:
        raise InvalidArgument(
            _("An owner must be 1 to %(max)d characters long."),
            code="length",
            params={"max": MAX_LENGTH},
        )
    # (Its name and a space: a revoked grant's hold, ``shared_release.revoked_owner``.)
    if value == RESERVED_OWNER or value.startswith(RESERVED_OWNER + " "):
        raise InvalidArgument(
            _("The owner %(owner)r is reserved: it marks a lock held by shared holders."),
            code="reserved",
            params={"owner": value},
        )
    return value


def validate_label(value: object) -> str:
    """Return ``value`` if it is a valid label, else raise ``ValidationError``.

    A label is a holder's public name ("web-3 pid 4121") that operators read in
    the admin and ``manage.py dlock`` and type to ``dlock release --holder``:
    0 to 255 characters, spaces allowed, and the rule of resource names about
    what people cannot see (no control or invisible formatting characters, no
    line or paragraph separators, Unicode normal form NFC).
    """
    if value == "" and isinstance(value, str):  # the default, every acquisition's: valid
        return value
    if not isinstance(value, str):
        raise InvalidArgument(_("A label must be a string."), code="invalid")
    _storable(value, A_LABEL)
    if len(value) > MAX_LENGTH:
        raise InvalidArgument(
            _("A label must be at most %(max)d characters long."),
            code="length",
            params={"max": MAX_LENGTH},
        )
    _check_visible(value, A_LABEL)
    return value


# The most permits a semaphore may have: well inside every database's integer.
MAX_LIMIT = 1_000_000


def validate_limit(value: object) -> int:
    """Return ``value`` if it is a valid semaphore limit (an integer from 1 to
    ``MAX_LIMIT``), else raise ``ValidationError``."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LIMIT:
        raise InvalidArgument(
            _("A limit must be a whole number of permits from 1 to %(max)d."),
            code="limit",
            params={"max": MAX_LIMIT},
        )
    return value


def _is_number(value: object) -> TypeGuard[int | float]:
    return not isinstance(value, bool) and isinstance(value, int | float)


def _within(seconds: int | float, *, zero_too: bool, most: float) -> bool:
    """Whether ``seconds`` is finite, more than 0 (or 0 too), and at most ``most``."""
    # An int too large for a float (10**400) is out of range, not an OverflowError.
    if isinstance(seconds, int) and abs(seconds) > 2**53:
        return False
    least_ok = seconds >= 0 if zero_too else seconds > 0
    return math.isfinite(seconds) and least_ok and seconds <= most


def validate_ttl(value: object) -> float:
    """Return ``value`` as seconds if it is a valid ttl (0 < ttl <= DLOCK_MAX_TTL)."""
    if not _is_number(value):
        raise InvalidArgument(_("A ttl must be a number of seconds."), code="invalid")
    max_ttl = conf.MAX_TTL
    if not _within(value, zero_too=False, most=max_ttl):
        raise InvalidArgument(
            _("A ttl must be greater than 0 and at most %(max)s seconds."),
            code="range",
            params={"max": max_ttl},
        )
    return float(value)


def validate_lock_delay(value: object, *, exclusive: bool = True) -> float:
    """Return ``value`` as seconds if it is a valid lock-delay (0 <= delay <=
    DLOCK_MAX_TTL; 0: none) of a lock held ``exclusive``-ly (a reader's or a
    permit's loss keeps nobody out). A ``timedelta`` is taken as its seconds."""
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if not _is_number(value):
        raise InvalidArgument(_("A lock_delay must be a number of seconds."), code="invalid")
    max_delay = conf.MAX_TTL
    if not _within(value, zero_too=True, most=max_delay):
        raise InvalidArgument(
            _("A lock_delay must be at least 0 and at most %(max)s seconds."),
            code="range",
            params={"max": max_delay},
        )
    if value and not exclusive:
        raise InvalidArgument(
            _("A lock_delay is for one resource held exclusively, not a reader or a permit."),
            code="lock_delay",
        )
    return float(value)


# A waiter's priority, in steps of a minute of waiting (``backends.tickets.PRIORITY_STEP``).
MAX_PRIORITY = 1000


def validate_priority(value: object) -> int:
    """Return ``value`` if it is a valid priority in the wait queue: a whole
    number from -MAX_PRIORITY to MAX_PRIORITY (0, the default: FIFO)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(_("A priority must be a whole number."), code="invalid")
    if not -MAX_PRIORITY <= value <= MAX_PRIORITY:
        raise InvalidArgument(
            _("A priority must be from -%(max)s to %(max)s."),
            code="range",
            params={"max": MAX_PRIORITY},
        )
    return value
