"""Django settings of the torture runner and its workers: the lock database
comes from ``TORTURE_DATABASE_URL`` (a SQLite file, a PostgreSQL or a MariaDB
database)."""

from __future__ import annotations

import os

import dj_database_url

SECRET_KEY = "django-dlock-torture"  # noqa: S105 - a test run only
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "django_dlock"]
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"

DATABASES = {"default": dj_database_url.parse(os.environ["TORTURE_DATABASE_URL"])}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["OPTIONS"] = {"transaction_mode": "IMMEDIATE", "timeout": 30}
elif DATABASES["default"]["ENGINE"] == "django.db.backends.mysql":
    # A dead server must not hang a worker: connecting gives up after a few seconds.
    DATABASES["default"]["OPTIONS"] = {"charset": "utf8mb4", "connect_timeout": 3}
else:
    DATABASES["default"]["OPTIONS"] = {"connect_timeout": 3}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "loggers": {"django_dlock": {"level": "CRITICAL"}},
}
