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
        from django_dlock.checks import check_settings
        from django_dlock.checks_durability import check_durability
        from django_dlock.checks_mysql import check_mysql_database
        from django_dlock.checks_replica import (
            check_lock_database_is_primary,
            check_lock_database_not_mirror,
        )

        checks.register(check_settings)
        checks.register(check_lock_database_not_mirror)
        # These query the lock database, so they run only where checks may
        # (migrate, check --database).
        checks.register(check_lock_database_is_primary, checks.Tags.database)
        checks.register(check_durability, checks.Tags.database)
        checks.register(check_mysql_database, checks.Tags.database)
