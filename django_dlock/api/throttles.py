"""The throttle API: ``POST /throttles/{key}`` with ``{"rate": "10/m"}`` records
a use of the key when the rate allows one, and says when the next is allowed
when it does not (``django_dlock.throttle``'s ``try_use()``)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import transaction
from django.utils.module_loading import import_string
from rest_framework import serializers
from rest_framework.permissions import BasePermission
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import BaseThrottle
from rest_framework.views import APIView

from django_dlock.api.encoding import path_errors
from django_dlock.api.parsers import LockJSONParser
from django_dlock.api.problems import problem_exception_handler
from django_dlock.api.serializers import ProblemSerializer
from django_dlock.api.throttling import LockCallThrottle
from django_dlock.conf import conf
from django_dlock.throttles import ThrottleDecision, throttle
from django_dlock.throttles.parsing import resolve_rate
from django_dlock.validators import validate_throttle_key

__all__ = [
    "ThrottleDecisionSerializer",
    "ThrottleInvalidInputProblemSerializer",
    "ThrottleUseRequestSerializer",
    "ThrottleView",
]


class ThrottleUseRequestSerializer(serializers.Serializer[Any]):
    rate = serializers.CharField(
        max_length=64,
        help_text='At most N uses per period: "10/m", "100/h", "5/10m", or the name of a rate '
        "in the server's DLOCK_THROTTLE_RATES.",
    )

    def validate_rate(self, value: str) -> str:
        try:
            resolve_rate(value)
        except DjangoValidationError as error:
            raise serializers.ValidationError(error.messages) from None
        return value


class ThrottleDecisionSerializer(serializers.Serializer[ThrottleDecision]):
    granted = serializers.BooleanField(help_text="Whether the use was granted (and recorded).")
    key = serializers.CharField()
    rate = serializers.CharField(help_text="The rate the use was decided by, as written.")
    at = serializers.DateTimeField(help_text="The database's time of the decision.")
    retry_after = serializers.SerializerMethodField(
        help_text="Seconds until a use would be granted again (0 when granted), by the "
        "database's clock."
    )
    remaining = serializers.IntegerField(
        help_text="How many more uses the window has room for now."
    )

    def get_retry_after(self, decision: ThrottleDecision) -> float:
        return decision.retry_after.total_seconds()


def _messages(help_text: str) -> serializers.ListField:
    return serializers.ListField(child=serializers.CharField(), required=False, help_text=help_text)


class ThrottleInvalidInputErrorsSerializer(serializers.Serializer[Any]):
    """The offending inputs of a throttle use, each with its messages. No other
    name appears."""

    key = _messages("The key in the path.")
    rate = _messages("`rate` of the body.")
    body = _messages("The body as a whole: malformed JSON, or JSON that is not an object.")


class ThrottleInvalidInputProblemSerializer(ProblemSerializer):
    """An RFC 9457 problem detail of invalid input: `errors` names what is wrong."""

    # A declared field: DRF's metaclass takes it off the class, so it does not
    # hide Serializer.errors at run time.
    errors = ThrottleInvalidInputErrorsSerializer(  # type: ignore[assignment]
        help_text="The offending fields, each with its messages.",
    )


class ThrottleView(APIView):
    """Use a throttle key: granted (and recorded), or when the next use is allowed.

    The permission classes (``DLOCK_API_PERMISSION_CLASSES``) are asked about
    the key as about a resource (``check_object_permissions``); the API's
    throttles apply. Errors are RFC 9457 problems.
    """

    parser_classes = [LockJSONParser]
    renderer_classes = [JSONRenderer]

    @classmethod
    def as_view(cls, **initkwargs: Any) -> Callable[..., Any]:  # type: ignore[override]
        view = super().as_view(**initkwargs)
        # A use refuses to run inside a caller's transaction, which
        # ATOMIC_REQUESTS would open around the view.
        for alias in settings.DATABASES:
            view = transaction.non_atomic_requests(using=alias)(view)
        return view

    def get_permissions(self) -> list[BasePermission]:
        return [import_string(path)() for path in conf.API_PERMISSION_CLASSES]

    def get_throttles(self) -> list[BaseThrottle]:
        return [*super().get_throttles(), LockCallThrottle()]

    def get_exception_handler(self) -> Callable[..., Response | None]:
        return problem_exception_handler

    def post(self, request: Request, key: str) -> Response:
        errors = path_errors(request)
        if errors:
            raise serializers.ValidationError({"key": errors})
        try:
            validate_throttle_key(key)
        except DjangoValidationError as error:
            raise serializers.ValidationError({"key": error.messages}) from None
        self.check_object_permissions(request, key)
        body = ThrottleUseRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        decision = throttle(key, body.validated_data["rate"]).try_use()
        data = ThrottleDecisionSerializer(decision).data
        if decision:
            return Response(data)
        wait = math.ceil(decision.retry_after.total_seconds())
        return Response(data, headers={"Retry-After": str(max(wait, 1))})


try:
    from django_dlock.api.throttle_schema import document
except ImportError:  # drf-spectacular is not installed: no schema to describe
    pass
else:
    document(
        ThrottleView,
        request=ThrottleUseRequestSerializer,
        response=ThrottleDecisionSerializer,
        invalid_input=ThrottleInvalidInputProblemSerializer,
    )
