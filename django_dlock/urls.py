"""Mount the lock API with ``path("api/", include("django_dlock.urls"))``."""

from __future__ import annotations

from django_dlock.api.urls import app_name, urlpatterns

__all__ = ["app_name", "urlpatterns"]
