"""A view of the host project, outside the lock API (its errors keep DRF's format)."""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import ValidationError
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.views import APIView


class HostView(APIView):
    permission_classes = [AllowAny]
    schema = None  # not in the OpenAPI schema

    def get(self, request: Request) -> Any:
        raise ValidationError({"detail": "host error"})
