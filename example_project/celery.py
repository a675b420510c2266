"""The example project's Celery app: ``celery -A example_project worker``.

The broker comes from CELERY_BROKER_URL (default: Redis on localhost). Tasks
are found in the ``tasks`` modules of the installed apps and of this project.
"""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")

app = Celery("example_project")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf["broker_url"] = os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0")
app.autodiscover_tasks(["example_project"])
