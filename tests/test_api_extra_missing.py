"""Without the ``[api]`` extra, a project that lists ``"django_dlock.api"`` (or
includes ``django_dlock.urls``) is told which extra to install, not that
``rest_framework`` is missing.

The work runs in a new interpreter in which DRF cannot be imported (an import
hook refuses it here; the ``base`` nox session runs this file where DRF is not
installed at all).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.vendor_independent

ROOT = Path(__file__).resolve().parent.parent

WITHOUT_DRF = """
import importlib.abc
import sys


class NoDRF(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "rest_framework":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, NoDRF())
"""

SETTINGS = """
from tests.settings_base import *  # noqa: F403
from tests.settings_base import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "django_dlock.api"]
"""

FIX = 'pip install "django-dlock[api]"'


def run(tmp_path: Path, code: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "settings_without_drf.py").write_text(SETTINGS)
    database = tmp_path / "db.sqlite3"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
        "DJANGO_SETTINGS_MODULE": "settings_without_drf",
        "DATABASE_URL": f"sqlite:///{database}",
        "DLOCK_TEST_SQLITE_FILE": str(database),
    }
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_DRF + code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_manage_py_check_names_the_extra(tmp_path: Path) -> None:
    result = run(
        tmp_path,
        "from django.core.management import execute_from_command_line\n"
        "execute_from_command_line(['manage.py', 'check'])\n",
    )
    assert result.returncode != 0
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith("django.core.exceptions.ImproperlyConfigured: "), result.stderr
    assert FIX in last_line
    assert "ModuleNotFoundError" not in result.stderr


@pytest.mark.parametrize("module", ["django_dlock.urls", "django_dlock.api.views"])
def test_importing_the_api_names_the_extra(tmp_path: Path, module: str) -> None:
    result = run(
        tmp_path,
        "from django.core.exceptions import ImproperlyConfigured\n"
        "try:\n"
        f"    import {module}\n"
        "except ImproperlyConfigured as error:\n"
        "    print(error)\n",
    )
    assert result.returncode == 0, result.stderr
    assert FIX in result.stdout
