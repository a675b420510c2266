"""``django_dlock`` has no import cycle: layers import downwards only."""

from __future__ import annotations

from pathlib import Path

import pytest

import django_dlock
from tests.import_graph import cycles, import_graph

pytestmark = pytest.mark.vendor_independent

PACKAGE = Path(django_dlock.__file__).parent


def test_django_dlock_has_no_import_cycle() -> None:
    assert cycles(import_graph(PACKAGE)) == []


def test_a_cycle_is_found_also_through_lazy_and_type_only_imports(tmp_path: Path) -> None:
    package = tmp_path / "demo"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from demo.sub.b import B\n")
    (package / "a.py").write_text("def f():\n    from demo.sub import b\n")
    (package / "sub" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..c import C\nB = 1\n"
    )
    (package / "c.py").write_text("from . import a\n")
    assert cycles(import_graph(package)) == [["demo.a", "demo.c", "demo.sub.b"]]


def test_the_backends_import_neither_the_manager_nor_the_models() -> None:
    graph = import_graph(PACKAGE)
    backends = [name for name in graph if name.startswith("django_dlock.backends")]
    for name in backends:
        assert not graph[name] & {"django_dlock.managers", "django_dlock.models"}, name


def test_only_the_admin_imports_the_admin() -> None:
    """Importing any module of ``django_dlock.admin`` runs its ``__init__``, which
    registers the admin: a project without ``django.contrib.admin`` could then
    not run ``manage.py dlock``."""
    graph = import_graph(PACKAGE)
    outside = [name for name in graph if not name.startswith("django_dlock.admin")]
    for name in outside:
        assert not {m for m in graph[name] if m.startswith("django_dlock.admin")}, name


# The operation layer: what the rest of the package reaches the database
# through. ``locking.queue`` is the waiter queue's operations (one call of the
# backend's queue each), as ``service`` is the locks'.
OPERATION_LAYER = ("django_dlock.service", "django_dlock.managers", "django_dlock.locking.queue")
# What the backends stand on: the rule, and helpers that know no layer.
BELOW_THE_BACKENDS = (
    "django_dlock.backends",
    "django_dlock.rules",
    "django_dlock.django_private",
    "django_dlock.exceptions",
    "django_dlock.prefix",
    "django_dlock.conf",
    "django_dlock.validators",
    "django_dlock.listeners.base",
    "django_dlock.listeners.sqlite",  # SQLite's wake-up datagrams, its "NOTIFY"
)


def test_the_layers_point_one_way() -> None:
    graph = import_graph(PACKAGE)
    # lock(), the features, the admin, the API and the commands reach the
    # database only through the operation layer (system checks ask each
    # backend, as Django asks each connection).
    reaching = sorted(
        f"{name} -> {imported}"
        for name, imports in graph.items()
        if not name.startswith(("django_dlock.backends", *OPERATION_LAYER, "django_dlock.checks"))
        for imported in imports
        if imported.startswith("django_dlock.backends")
    )
    assert reaching == []
    # The backends import nothing above the rule.
    above = sorted(
        f"{name} -> {imported}"
        for name, imports in graph.items()
        if name.startswith("django_dlock.backends")
        for imported in imports
        if not imported.startswith(BELOW_THE_BACKENDS)
    )
    assert above == []


def test_the_version_is_the_installed_packages() -> None:
    # pyproject.toml is the one place that states it; the package reads its metadata.
    from importlib.metadata import version

    assert django_dlock.__version__ == version("django-dlock")
    assert django_dlock.__version__.count(".") >= 2
