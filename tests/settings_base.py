"""Settings of a Django-only install: the test settings without DRF, drf-spectacular or Celery."""

from __future__ import annotations

from tests.settings import *  # noqa: F403
from tests.settings import INSTALLED_APPS

# The API's app too: its checks import DRF.
API_APPS = {"rest_framework", "rest_framework.authtoken", "drf_spectacular", "django_dlock.api"}
INSTALLED_APPS = [app for app in INSTALLED_APPS if app not in API_APPS]
ROOT_URLCONF = "tests.urls_base"
