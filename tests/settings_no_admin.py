"""Settings of a project without Django's admin (and without DRF or Celery):
the apps ``manage.py dlock`` needs, and nothing else."""

from __future__ import annotations

from tests.settings_base import *  # noqa: F403

INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "django_dlock"]
MIDDLEWARE = []
# No URLs: the project serves neither the admin nor the API.
ROOT_URLCONF = "tests.urls_none"
