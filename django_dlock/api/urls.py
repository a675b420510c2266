"""Routes of the lock API; a host mounts them with
``path("api/", include("django_dlock.urls"))``."""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.core.exceptions import ImproperlyConfigured
from django.urls import re_path
from rest_framework.routers import Route, SimpleRouter

from django_dlock.api.throttles import ThrottleView
from django_dlock.api.views import LockViewSet, RouteNotFoundView

if not apps.is_installed("django_dlock.api"):
    # Its AppConfig registers the API's system checks; without it a wrong
    # DLOCK_API_PERMISSION_CLASSES or throttle rate would surface as a 500.
    raise ImproperlyConfigured(
        'The lock API needs "django_dlock.api" in INSTALLED_APPS (after "rest_framework" '
        'and "django_dlock").'
    )

app_name = "django_dlock"


class LockRouter(SimpleRouter):
    """A router whose detail route also takes POST (acquire) and whose trailing
    slash is optional: ``locks/x`` and ``locks/x/`` are the same route."""

    routes = [
        Route(
            url=r"^{prefix}{trailing_slash}$",
            mapping={"get": "list"},
            name="{basename}-list",
            detail=False,
            initkwargs={"suffix": "List"},
        ),
        Route(
            url=r"^{prefix}/{lookup}{trailing_slash}$",
            mapping={"get": "retrieve", "post": "acquire", "delete": "release"},
            name="{basename}-detail",
            detail=True,
            initkwargs={"suffix": "Instance"},
        ),
        Route(
            url=r"^{prefix}/{lookup}/renew{trailing_slash}$",
            mapping={"post": "renew"},
            name="{basename}-renew",
            detail=True,
            initkwargs={"suffix": "Renew"},
        ),
    ]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.trailing_slash = "(?:/)?"


router = LockRouter()
router.register("locks", LockViewSet, basename="lock")

urlpatterns = [
    *router.urls,
    re_path(r"^locks/.*$", RouteNotFoundView.as_view(), name="lock-not-found"),
    re_path(r"^throttles/(?P<key>[^/]+)(?:/)?$", ThrottleView.as_view(), name="throttle-use"),
    re_path(r"^throttles/.*$", RouteNotFoundView.as_view(), name="throttle-not-found"),
]
