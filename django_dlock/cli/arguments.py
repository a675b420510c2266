"""The argparse ``type=`` validators of ``manage.py dlock`` and ``purge_locks``: each returns the
cleaned value or raises ``ArgumentTypeError`` with one sentence, so that a bad
argument exits 2 with a usage line and no traceback."""

from __future__ import annotations

import math
from argparse import ArgumentTypeError
from collections.abc import Callable

from django.core.exceptions import ValidationError

from django_dlock.kinds import LockKind
from django_dlock.validators import (
    validate_label,
    validate_lock_delay,
    validate_resource,
    validate_resource_prefix,
    validate_ttl,
)

# The longest --wait or --min-hold in seconds (about 31 years): longer ones
# overflow a timedelta. "--wait" without a number waits without end.
MAX_SECONDS = 10**9


def _validated(validator: Callable[[object], object], value: object, given: str = "") -> None:
    """``validator(value)``, its ``ValidationError`` an ``ArgumentTypeError``
    naming what was given (``given``, by default ``value``)."""
    try:
        validator(value)
    except ValidationError as error:
        shown = given or value
        raise ArgumentTypeError(f"{' '.join(error.messages)} Got {shown!r}.") from error


def resource(value: str) -> str:
    """A resource name, by the rules of every lock operation."""
    _validated(validate_resource, value)
    return value


def prefix(value: str) -> str:
    """The start of a resource name, by the same rules."""
    _validated(validate_resource_prefix, value)
    return value


def _number(value: str) -> float:
    try:
        return float(value)
    except ValueError:
        return math.nan


def ttl(value: str) -> float:
    """``--ttl``: seconds, more than 0 and at most ``DLOCK_MAX_TTL``."""
    number = _number(value)
    try:
        return validate_ttl(number)
    except ValidationError as error:
        raise ArgumentTypeError(f"{' '.join(error.messages)} Got {value!r}.") from error


def lock_delay(value: str) -> float:
    """``--lock-delay``: seconds, from 0 to ``DLOCK_MAX_TTL``."""
    number = _number(value)
    try:
        return validate_lock_delay(number)
    except ValidationError as error:
        raise ArgumentTypeError(f"{' '.join(error.messages)} Got {value!r}.") from error


def seconds(value: str) -> float:
    """``--wait SECONDS``, ``--min-hold``, ``--kill-after`` and ``purge_locks
    --older-than``: 0 or more seconds."""
    number = _number(value)
    if not math.isfinite(number) or not 0 <= number <= MAX_SECONDS:
        raise ArgumentTypeError(
            f"must be a number of seconds from 0 to {MAX_SECONDS}, not {value!r}."
        )
    return number


def exit_code(value: str) -> int:
    """``--conflict-exit-code``: what a process can exit with, 0 to 255."""
    try:
        number = int(value)
    except ValueError:
        number = -1
    if not 0 <= number <= 255:
        raise ArgumentTypeError(f"must be a whole number from 0 to 255, not {value!r}.")
    return number


def label(value: str) -> str:
    """``--label`` and ``--holder``: a holder's public name ("web-3 pid 4121"),
    by the rules of every lock operation, and not empty."""
    if not value:
        raise ArgumentTypeError("must be 1 to 255 characters long, not empty.")
    _validated(validate_label, value)
    return value


def limit(value: str) -> int:
    """``--limit``: a semaphore's number of permits."""
    try:
        number = int(value)
    except ValueError:
        number = 0
    _validated(lambda _: LockKind.semaphore(number), number, value)
    return number
