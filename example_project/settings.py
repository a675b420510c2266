"""Settings of the example project: SQLite in a file by default, or the database
that DATABASE_URL names (postgres://user:password@host:port/name, or mysql://... for MariaDB)."""

from __future__ import annotations

import importlib.util
import os
from importlib.metadata import version
from pathlib import Path

import dj_database_url

BASE_DIR = Path(__file__).resolve().parent

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "django-dlock-example-not-secret")
DEBUG = os.environ.get("DJANGO_DEBUG", "1") == "1"
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "[::1]"]

DATABASES = {
    "default": dj_database_url.config(
        default=f"sqlite:///{BASE_DIR / 'db.sqlite3'}", conn_max_age=60
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # IMMEDIATE: a write transaction takes SQLite's write lock at BEGIN, so two
    # processes never deadlock upgrading a read lock ("database is locked").
    DATABASES["default"]["OPTIONS"] = {"transaction_mode": "IMMEDIATE", "timeout": 20}
    DATABASES["default"]["CONN_MAX_AGE"] = 0
elif DATABASES["default"]["ENGINE"] == "django.db.backends.mysql":
    # utf8mb4: Django's MySQL connections default to utf8mb3, which has no emoji.
    DATABASES["default"]["OPTIONS"] = {"charset": "utf8mb4"}

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_dlock",
    "django_dlock.api",
]
# Prometheus metrics of the locks, served at /metrics (urls.py), with the `prometheus`
# extra: the `api` extra alone is enough to run the example.
if importlib.util.find_spec("prometheus_client") is not None:
    INSTALLED_APPS.append("django_dlock.contrib.prometheus.PrometheusMetrics")

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "example_project.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
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

WSGI_APPLICATION = "example_project.wsgi.application"

USE_TZ = True
TIME_ZONE = "UTC"
STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

DLOCK_DEFAULT_TTL = 60
DLOCK_MAX_TTL = 86400

# The lock API (mounted at /api/ in urls.py): `manage.py drf_create_token USER`
# gives a token for "Authorization: Token ..."; a logged-in admin session works too.
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    # The lock API's throttle scopes: every call, and (stricter) renewals and
    # releases refused for a wrong owner, per user (per address when anonymous).
    "DEFAULT_THROTTLE_RATES": {"dlock": "600/min", "dlock-owner-failure": "20/hour"},
}
DLOCK_API_PERMISSION_CLASSES = ["rest_framework.permissions.IsAuthenticated"]
# The OpenAPI schema at /api/schema/ and Swagger UI at /api/docs/, with its
# JavaScript and CSS served from drf-spectacular-sidecar (works offline).
SPECTACULAR_SETTINGS = {
    "TITLE": "django-dlock example",
    "DESCRIPTION": "Distributed locks kept in the database.",
    # The installed package's, so the page never says another release.
    "VERSION": version("django-dlock"),
    # The schema describes the lock API, not the view that serves the schema.
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}
