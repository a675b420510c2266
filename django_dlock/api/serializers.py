"""Request and response bodies of the lock API. The rules for resource, owner
and ttl are those of ``django_dlock.validators``, which the Python API uses."""

from __future__ import annotations

import datetime
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import serializers

from django_dlock.models import DistributedLock
from django_dlock.permissions import SEE_OWNERS_PERMISSION
from django_dlock.validators import MAX_LENGTH, validate_owner, validate_ttl


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


# -- request bodies ----------------------------------------------------------


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


class LockSerializer(serializers.Serializer[DistributedLock]):
    """A lock held now. `owner` is left out for callers who may not see owners."""

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

    def __init__(self, *args: Any, show_owner: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not show_owner:
            self.fields.pop("owner")


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
    """Another owner holds the lock; try again after `Retry-After` seconds."""

    acquired = FlagField(False)
    resource = serializers.CharField()
    expires_at = UTCDateTimeField(help_text="When the current holder's lock expires.")

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
