"""The HTTP API (Django REST framework): the only code of django-dlock that imports DRF."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

try:
    import rest_framework  # noqa: F401 - every module of this package needs it
except ModuleNotFoundError as error:
    if error.name != "rest_framework":
        raise
    # Every way in (INSTALLED_APPS, include("django_dlock.urls"), an import)
    # passes here: name the fix rather than the missing module.
    raise ImproperlyConfigured(
        "django_dlock.api needs Django REST framework, which is not installed: "
        'pip install "django-dlock[api]"'
    ) from None
