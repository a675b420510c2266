"""Settings of a Django-only install: the test settings without DRF, drf-spectacular or Celery."""

from __future__ import annotations

from tests.settings import *  # noqa: F403
from tests.settings import INSTALLED_APPS

INSTALLED_APPS = [
    app
    for app in INSTALLED_APPS
    if app not in {"rest_framework", "rest_framework.authtoken", "drf_spectacular"}
]
ROOT_URLCONF = "tests.urls_base"
