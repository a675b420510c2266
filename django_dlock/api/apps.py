from __future__ import annotations

from django.apps import AppConfig
from django.core import checks
from django.utils.translation import gettext_lazy as _


class DjangoDlockApiConfig(AppConfig):
    """The HTTP API (the ``api`` extra). Add ``"django_dlock.api"`` to
    ``INSTALLED_APPS`` next to ``"django_dlock"``; it has no models."""

    name = "django_dlock.api"
    label = "django_dlock_api"
    verbose_name = _("Distributed locks API")

    def ready(self) -> None:
        from django_dlock.api.checks import check_api_settings

        checks.register(check_api_settings)
