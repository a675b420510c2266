"""Test settings: SQLite in a file by default, PostgreSQL or MariaDB when DATABASE_URL says so."""

from __future__ import annotations

import importlib.util
import os
import tempfile
from pathlib import Path

import dj_database_url

SECRET_KEY = "django-dlock-tests"  # noqa: S105 - tests only
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"

# Several processes must see one database, so SQLite lives in a file, never in memory.
# The name goes into the environment, so that worker processes the tests start
# (which inherit it) open the same file.
_SQLITE_FILE = os.environ.setdefault(
    "DLOCK_TEST_SQLITE_FILE",
    str(Path(tempfile.gettempdir()) / f"django-dlock-tests-{os.getpid()}.sqlite3"),
)

DATABASE_URL = os.environ.get("DATABASE_URL", f"sqlite:///{_SQLITE_FILE}")
DATABASES = {"default": dj_database_url.parse(DATABASE_URL)}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["OPTIONS"] = {"transaction_mode": "IMMEDIATE", "timeout": 30}
    DATABASES["default"]["TEST"] = {"NAME": _SQLITE_FILE}
elif DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # DLOCK_PG_SERVER_SIDE_BINDING=1: the backends' portable operations (the
    # one-statement ones need psycopg 3's client-side binding).
    if os.environ.get("DLOCK_PG_SERVER_SIDE_BINDING") == "1":
        DATABASES["default"]["OPTIONS"] = {"server_side_binding": True}
elif DATABASES["default"]["ENGINE"] == "django.db.backends.mysql":
    # utf8mb4: resources are any Unicode, also outside the Basic Multilingual Plane.
    DATABASES["default"]["OPTIONS"] = {"charset": "utf8mb4"}
    # A test database per run, so that runs on one server never meet.
    DATABASES["default"]["TEST"] = {"CHARSET": "utf8mb4", "NAME": f"test_dlock_{os.getpid()}"}

# The same database through a second connection, for DLOCK_DATABASE tests. Not a
# TEST["MIRROR"] (which declares a replica): with the same NAME, Django's test
# runner creates the test database once and shares it.
DATABASES["locks"] = {**DATABASES["default"]}

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.admin",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "django_dlock",
    "django_dlock.api",
    "tests.testapp",
]

# Django's tasks framework, where installed (tests/test_contrib_tasks.py): the backport on
# Django 5.2, and django-tasks-db's backend for real db_worker processes.
if importlib.util.find_spec("django_tasks_db") is not None:
    _TASKS = "django.tasks" if importlib.util.find_spec("django.tasks") else "django_tasks"
    if _TASKS == "django_tasks":
        INSTALLED_APPS.append("django_tasks")
    INSTALLED_APPS.append("django_tasks_db")
    TASKS = {
        "default": {"BACKEND": f"{_TASKS}.backends.immediate.ImmediateBackend"},
        "db": {"BACKEND": "django_tasks_db.DatabaseBackend"},
    }

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

ROOT_URLCONF = "tests.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

STATIC_URL = "/static/"
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}
SPECTACULAR_SETTINGS = {"TITLE": "django-dlock", "VERSION": "test"}
