from __future__ import annotations

from django.apps import AppConfig
from django.core import checks
from django.utils.translation import gettext_lazy as _


class DjangoDlockConfig(AppConfig):
    name = "django_dlock"
    verbose_name = _("Distributed locks")
    # Explicit, so that a host project's DEFAULT_AUTO_FIELD never creates migrations here.
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django_dlock.checks import check_database, check_settings

        checks.register(check_settings)
        # Its settings part runs on every check; it queries the lock database
        # only where checks may (migrate, check --database).
        checks.register(check_database, checks.Tags.database)
