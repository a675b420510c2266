"""A Django-only install works and never imports DRF, drf-spectacular, Celery, prometheus_client
or OpenTelemetry.

The work runs in a new interpreter, so that nothing the rest of the suite imported can hide an
import the core makes. The `base` nox session runs this file with only Django installed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.vendor_independent

OPTIONAL_MODULES = (
    "rest_framework",
    "drf_spectacular",
    "celery",
    "kombu",
    "prometheus_client",
    "opentelemetry",
)

SCRIPT = f"""
import sys
from io import StringIO

import django

django.setup()

from django.contrib import admin
from django.core.management import call_command

import django_dlock
import django_dlock.admin
import django_dlock.signals
from django_dlock import lock
from django_dlock.models import DistributedLock

call_command("migrate", verbosity=0)
call_command("check", fail_level="WARNING")
assert admin.site.is_registered(DistributedLock)

with lock("base:install", ttl=30) as held:
    assert DistributedLock.objects.active().filter(resource="base:install").exists()
assert not DistributedLock.objects.active().filter(resource="base:install").exists()

assert DistributedLock.objects.acquire("base:expired", owner="w", ttl=0.001) is not None
out = StringIO()
call_command("purge_locks", stdout=out)
assert not DistributedLock.objects.exists(), out.getvalue()

imported = sorted(name for name in {OPTIONAL_MODULES!r} if name in sys.modules)
assert not imported, f"the core imported {{imported}}"
"""


def run_python(settings: str, database: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` in a new process with ``settings`` on the SQLite file ``database``."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": settings,
        "DATABASE_URL": f"sqlite:///{database}",
        "DLOCK_TEST_SQLITE_FILE": str(database),
    }
    return subprocess.run(
        [sys.executable, *args],
        cwd=Path(__file__).resolve().parent.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_core_works_without_drf_or_celery(tmp_path: Path) -> None:
    result = run_python("tests.settings_base", tmp_path / "base.sqlite3", "-c", SCRIPT)
    assert result.returncode == 0, result.stderr


# A lock for `dlock list`, `show` and `release` to find.
HOLD = """
import django

django.setup()

from django.core.management import call_command

from django_dlock.models import DistributedLock

call_command("migrate", verbosity=0)
assert DistributedLock.objects.acquire("job:nightly", owner="o", ttl=300, label="web-1")
"""


def test_every_dlock_action_works_without_the_admin(tmp_path: Path) -> None:
    """``manage.py dlock`` (cron's and leader election's entry point) in a project
    whose INSTALLED_APPS are contenttypes, auth and django_dlock."""
    database = tmp_path / "no-admin.sqlite3"

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return run_python("tests.settings_no_admin", database, *args)

    held = run("-c", HOLD)
    assert held.returncode == 0, held.stderr
    outputs = {}
    for action in (
        ["list"],
        ["show", "job:nightly"],
        ["release", "job:nightly", "--holder", "web-1", "--yes"],
        ["run", "job:nightly", "--", sys.executable, "-c", "pass"],
    ):
        result = run("-m", "django", "dlock", *action)
        assert result.returncode == 0, (action, result.stderr)
        assert "Traceback" not in result.stderr, (action, result.stderr)
        outputs[action[0]] = result.stdout
    assert "job:nightly" in outputs["list"]
    assert "web-1" in outputs["show"]
    assert "Released the lock on 'job:nightly'" in outputs["release"]
