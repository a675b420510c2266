"""How drf-spectacular describes the lock API's own serializer fields (each
extension registers itself when this module is imported, by ``schema``)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import (
    OpenApiSerializerExtension,
    OpenApiSerializerFieldExtension,
)

from django_dlock.conf import conf
from django_dlock.validators import MAX_LENGTH, MAX_LIMIT, label_character_class


class InvalidInputErrorsExtension(OpenApiSerializerExtension):  # type: ignore[no-untyped-call]
    """``errors`` of an invalid-input problem names no input but those listed."""

    target_class = "django_dlock.api.serializers.InvalidInputErrorsSerializer"

    def map_serializer(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        # drf-spectacular's own mapping, as its docs show for extensions.
        schema: dict[str, Any] = auto_schema._map_serializer(
            self.target, direction, bypass_extensions=True
        )
        schema["additionalProperties"] = False
        return schema


class TtlFieldExtension(OpenApiSerializerFieldExtension):  # type: ignore[no-untyped-call]
    target_class = "django_dlock.api.serializers.TtlField"

    def map_serializer_field(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        return {
            "type": "number",
            "minimum": 0,
            "exclusiveMinimum": True,
            "maximum": conf.MAX_TTL,  # read when the schema is generated
        }


class LockDelayFieldExtension(OpenApiSerializerFieldExtension):  # type: ignore[no-untyped-call]
    target_class = "django_dlock.api.serializers.LockDelayField"

    def map_serializer_field(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        schema: dict[str, Any] = {
            "type": "number",
            "minimum": 0,
            "maximum": conf.MAX_TTL,  # read when the schema is generated
        }
        if self.target.allow_null:
            schema["nullable"] = True
        return schema


class LimitFieldExtension(OpenApiSerializerFieldExtension):  # type: ignore[no-untyped-call]
    target_class = "django_dlock.api.serializers.LimitField"

    def map_serializer_field(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        return {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT}


class LabelFieldExtension(OpenApiSerializerFieldExtension):  # type: ignore[no-untyped-call]
    target_class = "django_dlock.api.serializers.LabelField"

    def map_serializer_field(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        # No control or invisible formatting characters, nor line or paragraph
        # separators; NFC, the rest of validate_label's rule, no pattern expresses.
        # The length is the pattern's only, as the resource's is: tools that fold a
        # maxLength into the pattern (schemathesis) write its characters outside the
        # Basic Multilingual Plane as Python's \U escapes, which ECMAScript cannot read.
        return {
            "type": "string",
            "pattern": f"^{label_character_class()}{{0,{MAX_LENGTH}}}$",
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
