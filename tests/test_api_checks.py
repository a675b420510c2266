"""``manage.py check`` of the lock API (``django_dlock.api.checks``) and the conf
property of DLOCK_API_PERMISSION_CLASSES."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import textwrap
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from django_dlock.api.checks import check_api_settings
from django_dlock.conf import conf


def error_ids() -> list[str]:
    return [message.id for message in check_api_settings() if message.id]


def test_default_permission_classes(settings: Any) -> None:
    assert conf.API_PERMISSION_CLASSES == ["rest_framework.permissions.IsAuthenticated"]
    settings.DLOCK_API_PERMISSION_CLASSES = ["rest_framework.permissions.AllowAny"]
    assert conf.API_PERMISSION_CLASSES == ["rest_framework.permissions.AllowAny"]
    assert not [i for i in error_ids() if i.startswith("django_dlock.E1")]


@pytest.mark.parametrize(
    "value",
    [
        "rest_framework.permissions.IsAuthenticated",  # a string, not a list
        None,
        [42],
        ("rest_framework.permissions.IsAuthenticated", None),
    ],
)
def test_not_a_list_of_paths_is_e101(settings: Any, value: Any) -> None:
    settings.DLOCK_API_PERMISSION_CLASSES = value
    assert "django_dlock.E101" in error_ids()


@pytest.mark.parametrize("path", ["nope.Missing", "rest_framework.permissions.Missing", ""])
def test_unimportable_path_is_e102(settings: Any, path: str) -> None:
    settings.DLOCK_API_PERMISSION_CLASSES = [path]
    assert "django_dlock.E102" in error_ids()


@pytest.mark.parametrize("path", ["django.db.models.Model", "django_dlock.conf.conf"])
def test_not_a_permission_class_is_e103(settings: Any, path: str) -> None:
    settings.DLOCK_API_PERMISSION_CLASSES = [path]
    assert "django_dlock.E103" in error_ids()


def test_composed_permissions_and_tuples_are_accepted(settings: Any) -> None:
    settings.DLOCK_API_PERMISSION_CLASSES = (
        "rest_framework.permissions.IsAdminUser",
        "rest_framework.permissions.IsAuthenticatedOrReadOnly",
    )
    assert not [i for i in error_ids() if i.startswith("django_dlock.E1")]


def test_manage_py_check_fails_on_a_bad_value(settings: Any) -> None:
    settings.DLOCK_API_PERMISSION_CLASSES = ["nope.Missing"]
    with pytest.raises(SystemCheckError, match="django_dlock.E102"):
        call_command("check", stdout=StringIO(), stderr=StringIO())


def test_setting_and_problem_types_are_documented() -> None:
    from django_dlock.api.problems import PROBLEM_TYPES, problem_type

    docs = Path(__file__).resolve().parent.parent / "docs"
    assert "## `DLOCK_API_PERMISSION_CLASSES`" in (docs / "settings.md").read_text()
    api = (docs / "api.md").read_text()
    for _exception, slug, _title in PROBLEM_TYPES:
        assert f"`{problem_type(slug)}`" in api, slug


def test_the_core_runs_its_checks_without_drf() -> None:
    """Without DRF importable, the core (model, manager, lock(), admin, purge_locks,
    checks) loads and ``manage.py check`` passes: only django_dlock.api needs DRF."""
    script = textwrap.dedent(
        """
        import sys
        sys.modules["rest_framework"] = None  # any import of DRF raises ImportError
        import django
        from django.conf import settings
        settings.configure(
            INSTALLED_APPS=["django.contrib.auth", "django.contrib.contenttypes",
                            "django.contrib.admin", "django.contrib.messages",
                            "django.contrib.sessions", "django_dlock"],
            DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": sys.argv[1],
                                   "OPTIONS": {"transaction_mode": "IMMEDIATE"}}},
            USE_TZ=True,
        )
        django.setup()
        import django_dlock.admin, django_dlock.checks, django_dlock.managers, django_dlock.models
        from django_dlock import lock
        from django_dlock.checks import check_settings
        assert not [m for m in check_settings() if m.is_serious()], check_settings()
        print("ok")
        """
    )
    with tempfile.TemporaryDirectory() as directory:
        result = subprocess.run(
            [sys.executable, "-c", script, str(Path(directory) / "db.sqlite3")],
            cwd=Path(__file__).resolve().parent.parent,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("ok")


def test_throttle_rate_drf_cannot_read_is_e104(settings: Any) -> None:
    for rate in ["10/fortnight", "ten/min", "10", 10]:
        settings.REST_FRAMEWORK = {
            **settings.REST_FRAMEWORK,
            "DEFAULT_THROTTLE_RATES": {"dlock": rate},
        }
        assert "django_dlock.E104" in error_ids(), rate
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {"dlock": "100/min", "dlock-owner-failure": "5/hour"},
    }
    assert "django_dlock.E104" not in error_ids()


def test_including_the_urls_without_the_api_app_names_the_fix() -> None:
    script = textwrap.dedent(
        """
        import django, os
        os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"
        from django.conf import settings
        settings.INSTALLED_APPS  # load
        settings.INSTALLED_APPS = [a for a in settings.INSTALLED_APPS if a != "django_dlock.api"]
        django.setup()
        from django.core.exceptions import ImproperlyConfigured
        try:
            import django_dlock.urls
        except ImproperlyConfigured as error:
            print(error)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=Path(__file__).resolve().parent.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert '"django_dlock.api" in INSTALLED_APPS' in result.stdout, result.stderr
