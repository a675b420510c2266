"""``manage.py check`` of the lock API (``django_dlock.api.checks``) and the conf
property of DLOCK_API_PERMISSION_CLASSES."""

from __future__ import annotations

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


def test_setting_and_problem_types_are_documented_in_readme() -> None:
    from django_dlock.api.problems import PROBLEM_TYPES, problem_type

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    assert "### `DLOCK_API_PERMISSION_CLASSES`" in readme
    for _exception, slug, _title in PROBLEM_TYPES:
        assert f"`{problem_type(slug)}`" in readme, slug
