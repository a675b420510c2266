"""Request and response bodies of the lock API. The rules for resource, owner
and ttl are those of ``django_dlock.validators``, which the Python API uses."""

from __future__ import annotations

import datetime
from typing import Any, cast

from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import serializers

from django_dlock.kinds import LockKind
from django_dlock.models import DistributedLock
from django_dlock.permissions import SEE_OWNERS_PERMISSION
from django_dlock.rules import EXCLUSIVE, SHARED
from django_dlock.validators import (
    MAX_LENGTH,
    validate_label,
    validate_lock_delay,
    validate_owner,
    validate_ttl,
)


def _drf_error(error: DjangoValidationError) -> serializers.ValidationError:
    return serializers.ValidationError(error.messages)


class OwnerField(serializers.CharField):
    """An owner token exactly as sent: not trimmed, checked by ``validate_owner``."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("max_length", MAX_LENGTH)
        super().__init__(trim_whitespace=False, allow_blank=False, **kwargs)

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):  # CharField would turn 42 into "42"
            raise serializers.ValidationError("An owner must be a string.", code="invalid")
        try:
            return validate_owner(super().to_internal_value(data))
        except DjangoValidationError as error:
            raise _drf_error(error) from None


class TtlField(serializers.Field[float, Any, float, Any]):
    """Seconds as a JSON number: never a string or a boolean, finite, within
    ``0 < ttl <= DLOCK_MAX_TTL``."""

    def to_internal_value(self, data: Any) -> float:
        try:
            return validate_ttl(data)
        except DjangoValidationError as error:
            raise _drf_error(error) from None

    def to_representation(self, value: float) -> float:
        return value


class LockDelayField(serializers.Field[float | None, Any, float | None, Any]):
    """A lock-delay in seconds as a JSON number: never a string or a boolean,
    finite, within ``0 <= lock_delay <= DLOCK_MAX_TTL``; shown as seconds, or
    null without one."""

    def get_attribute(self, instance: Any) -> Any:
        return getattr(instance, cast(str, self.source), None)  # a shared hold has none

    def to_internal_value(self, data: Any) -> float:
        try:
            return validate_lock_delay(data)
        except DjangoValidationError as error:
            raise _drf_error(error) from None

    def to_representation(self, value: datetime.timedelta | float | None) -> float | None:
        if isinstance(value, datetime.timedelta):
            return value.total_seconds()
        return value


# -- request bodies ----------------------------------------------------------


class StrictBooleanField(serializers.BooleanField):
    """A JSON ``true`` or ``false``, never a string or a number that reads as one."""

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            raise serializers.ValidationError("Must be true or false.", code="invalid")
        return data


class LimitField(serializers.Field[int, Any, int, Any]):
    """A semaphore's number of permits: a JSON integer from 1 to ``MAX_LIMIT``."""

    def to_internal_value(self, data: Any) -> int:
        try:
            # The kind's check, as lock() and acquire() make it; a semaphore has a limit.
            return cast(int, LockKind.semaphore(data).limit)
        except DjangoValidationError as error:
            raise _drf_error(error) from None

    def to_representation(self, value: int) -> int:
        return value


class LabelField(serializers.CharField):
    """A holder's public name, checked by ``validate_label``."""

    def __init__(self, **kwargs: Any) -> None:
        # No max_length: validate_label checks the length, and the schema says it
        # in the pattern (see LabelFieldExtension).
        super().__init__(trim_whitespace=False, **kwargs)

    def run_validation(self, data: Any = serializers.empty) -> Any:
        # "" is a label (none). Taken here rather than with allow_blank, which
        # drf-spectacular would describe as a second, overlapping schema.
        return "" if data == "" else super().run_validation(data)

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            raise serializers.ValidationError("A label must be a string.", code="invalid")
        try:
            return validate_label(super().to_internal_value(data))
        except DjangoValidationError as error:
            raise _drf_error(error) from None


class AcquireRequestSerializer(serializers.Serializer[Any]):
    owner = OwnerField(
        required=False,
        help_text="The holder's token. Omit it to have a random 128-bit token generated "
        "(returned in the answer).",
    )
    ttl = TtlField(
        required=False,
        help_text="Seconds until the lock expires by itself: greater than 0, at most "
        "DLOCK_MAX_TTL. Default: DLOCK_DEFAULT_TTL.",
    )
    reentrant = StrictBooleanField(
        required=False,
        help_text="The owner that holds it already adds a hold (released one at a time) "
        "rather than only extending it.",
    )
    shared = StrictBooleanField(
        required=False,
        help_text="Hold it as one of many readers: none beside the exclusive holder, and "
        "none ahead of a writer queued in lock().",
    )
    limit = LimitField(
        required=False,
        help_text="Hold one of at most this many permits of a semaphore. While the resource "
        "has holders, another limit or kind is a 409 kind-mismatch.",
    )
    # A declared field: DRF's metaclass takes it off the class, so it does not
    # hide Field.label at run time.
    label = LabelField(  # type: ignore[assignment]
        required=False,
        help_text="A public name for the holder (shown to everyone who may read the lock; "
        "unlike the owner, not a secret): no control or invisible formatting characters, "
        "in Unicode normal form NFC, as resource names.",
    )
    lock_delay = LockDelayField(
        required=False,
        help_text="Seconds (at least 0, at most DLOCK_MAX_TTL) for which nobody may take the "
        "resource after this hold is lost rather than released: its lease runs out, or an "
        "operator force-releases it (Chubby's lock-delay). Exclusive locks only: with "
        "`shared` or `limit` it is a 400. Default: none.",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs.get("lock_delay"):
            kind = LockKind.from_flags(shared=attrs.get("shared"), limit=attrs.get("limit"))
            exclusive = kind.is_exclusive
            try:
                validate_lock_delay(attrs["lock_delay"], exclusive=exclusive)
            except DjangoValidationError as error:
                raise serializers.ValidationError({"lock_delay": error.messages}) from None
        return attrs


class RenewRequestSerializer(serializers.Serializer[Any]):
    owner = OwnerField(help_text="The token of the holder.")
    ttl = TtlField(
        required=False,
        help_text="New seconds from now until the lock expires. Default: DLOCK_DEFAULT_TTL.",
    )


class ReleaseRequestSerializer(serializers.Serializer[Any]):
    owner = OwnerField(help_text="The token of the holder.")


# -- response bodies ---------------------------------------------------------

# The largest signed 64-bit integer; fencing tokens count up by one per grant.
MAX_FENCING_TOKEN = 2**63 - 1
# Plain serializers, written by the views only: their fields are not read-only,
# so that the schema marks exactly the keys that are always present as required.


class UTCDateTimeField(serializers.DateTimeField):
    """ISO 8601 in UTC, whatever the host's ``TIME_ZONE``."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(default_timezone=datetime.UTC, **kwargs)


# The docstrings of the response serializers are the schema's descriptions of
# their components, which generated clients copy: plain text, no markup.


class HoldSerializer(serializers.Serializer[Any]):
    """One hold of a resource: a reader, or a semaphore's permit. `owner` is
    left out for callers who may not see owners."""

    owner = serializers.CharField(
        required=False,
        help_text="The holder's token, a secret: shown only to users with the "
        f"`{SEE_OWNERS_PERMISSION}` permission.",
    )
    label = serializers.CharField(  # type: ignore[assignment]  # a declared field (see above)
        allow_blank=True, help_text="The holder's public name."
    )
    mode = serializers.ChoiceField(choices=[EXCLUSIVE, SHARED])
    hold_count = serializers.IntegerField(
        min_value=1, help_text="Its holds: a reentrant holder's count, else 1."
    )
    fencing_token = serializers.IntegerField(min_value=1, max_value=2**63 - 1)
    acquired_at = serializers.DateTimeField(default_timezone=datetime.UTC)
    expires_at = serializers.DateTimeField(default_timezone=datetime.UTC)

    def __init__(self, *args: Any, show_owner: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not show_owner:
            self.fields.pop("owner")


class LockSerializer(serializers.Serializer[DistributedLock]):
    """A lock held now. `owner` is left out for callers who may not see owners,
    and for a lock its shared holders hold (then `holders` lists them)."""

    resource = serializers.CharField()
    owner = serializers.CharField(
        required=False,
        help_text="The holder's token, a secret: knowing it is the right to renew and release. "
        f"Shown only to users with the `{SEE_OWNERS_PERMISSION}` permission (who may "
        "force-release locks); left out for everyone else, staff included.",
    )
    fencing_token = serializers.IntegerField(
        min_value=1,
        # The column is a PositiveBigIntegerField: the bound makes the schema
        # say int64, so that generators for Java, Go or C# make no 32-bit field.
        max_value=MAX_FENCING_TOKEN,
        help_text="Larger than every token issued earlier for this resource.",
    )
    acquired_at = UTCDateTimeField(help_text="When the current holder took the lock.")
    expires_at = UTCDateTimeField(help_text="When the lock expires unless renewed.")
    mode = serializers.ChoiceField(
        choices=[EXCLUSIVE, SHARED],
        help_text="exclusive: one holder; shared: readers, or a semaphore's permits (`limit`).",
    )
    hold_count = serializers.IntegerField(
        min_value=1, help_text="The exclusive holder's holds (reentrant acquisitions add one)."
    )
    limit = serializers.IntegerField(
        allow_null=True, min_value=1, help_text="The semaphore's number of permits, or null."
    )
    label = serializers.CharField(  # type: ignore[assignment]  # a declared field (see above)
        allow_blank=True, help_text="The holder's public name."
    )
    holders = HoldSerializer(
        many=True,
        required=False,
        help_text="The valid holds of a shared resource (readers or permits), oldest first.",
    )
    lock_delay = LockDelayField(
        allow_null=True,
        help_text="The exclusive holder's lock-delay in seconds: if its hold is lost rather "
        "than released (it expires, or is force-released), nobody may take the resource for "
        "that long after. Null: none.",
    )

    def __init__(self, *args: Any, show_owner: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.show_owner = show_owner
        if not show_owner:
            self.fields.pop("owner")

    def to_representation(self, instance: Any) -> dict[str, Any]:
        data = super().to_representation(instance)
        holders = getattr(instance, "shared_holders", None)
        if getattr(instance, "is_shared", False):
            data.pop("owner", None)  # its owner marks the shared holders
            data["holders"] = HoldSerializer(
                holders or [], many=True, show_owner=self.show_owner
            ).data
        else:
            data.pop("holders", None)
        return data


class OwnedLockSerializer(LockSerializer):
    """A lock as its owner sees it, owner included."""

    owner = serializers.CharField(help_text="The holder's token.")


class FlagField(serializers.BooleanField):
    """A boolean that always has one value in its serializer (for the schema)."""

    def __init__(self, value: bool, **kwargs: Any) -> None:
        self.value = value
        super().__init__(**kwargs)

    def get_attribute(self, instance: Any) -> bool:
        return self.value


class AcquiredSerializer(OwnedLockSerializer):
    """The lock was acquired: it is the caller's."""

    acquired = FlagField(True)

    def to_representation(self, instance: DistributedLock) -> dict[str, Any]:
        data = super().to_representation(instance)
        return {"acquired": data.pop("acquired"), **data}


class NotAcquiredSerializer(serializers.Serializer[Any]):
    """Another owner holds the lock, or the lock-delay of a holder that lost it
    runs; try again after `Retry-After` seconds."""

    acquired = FlagField(False)
    resource = serializers.CharField()
    expires_at = UTCDateTimeField(
        help_text="When the current holder's lock expires; while the lock-delay of a holder "
        "that lost it runs, when the resource becomes available."
    )

    def to_representation(self, instance: Any) -> dict[str, Any]:
        data = super().to_representation(instance)
        return {"acquired": data.pop("acquired"), **data}


class ProblemSerializer(serializers.Serializer[Any]):
    """An RFC 9457 problem detail."""

    # For the schema only: problems.problem_exception_handler writes the bodies.

    type = serializers.CharField(help_text="A URI naming the kind of problem.")
    title = serializers.CharField()
    status = serializers.IntegerField()
    detail = serializers.CharField()


def _messages(help_text: str) -> serializers.ListField:
    return serializers.ListField(child=serializers.CharField(), required=False, help_text=help_text)


class InvalidInputErrorsSerializer(serializers.Serializer[Any]):
    """The offending inputs, each with its messages: the resource of the path, a
    field of the body, a query parameter of the list, or the body as a whole.
    No other name appears."""

    # Every name a 400 of the lock API can use; the schema admits no other,
    # and every response the tests see is checked against it.

    resource = _messages("The resource in the path.")
    owner = _messages("`owner` of the body.")
    ttl = _messages("`ttl` of the body.")
    reentrant = _messages("`reentrant` of the body.")
    shared = _messages("`shared` of the body.")
    limit = _messages("`limit` of the body.")
    label = _messages("`label` of the body.")  # type: ignore[assignment]  # a declared field
    lock_delay = _messages("`lock_delay` of the body.")
    prefix = _messages("The `prefix` query parameter.")
    cursor = _messages("The `cursor` query parameter.")
    page_size = _messages("The `page_size` query parameter.")
    body = _messages("The body as a whole: malformed JSON, or JSON that is not an object.")


class InvalidInputProblemSerializer(ProblemSerializer):
    """An RFC 9457 problem detail of invalid input: `errors` names what is wrong."""

    # A declared field: DRF's metaclass takes it off the class, so it does not
    # hide Serializer.errors at run time.
    errors = InvalidInputErrorsSerializer(  # type: ignore[assignment]
        help_text="The offending fields, each with its messages.",
    )
