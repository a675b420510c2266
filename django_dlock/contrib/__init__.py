"""Integrations with other libraries; each module imports its library."""

from __future__ import annotations

import importlib
from types import ModuleType


def extra_missing(error: ModuleNotFoundError, package: str, module: str, install: str) -> Exception:
    """What the import of ``module`` raises for ``error``: a ``ModuleNotFoundError``
    that says what to install (``install``) when the missing module is
    ``package`` (or one of its modules); else ``error`` itself, as it is."""
    missing = error.name or ""
    if missing != package and not missing.startswith(f"{package}."):
        return error
    return ModuleNotFoundError(
        f"{module} needs {package}, which is not installed: {install}", name=missing
    )


def import_extra(package: str, module: str, install: str) -> ModuleType:
    """``package``, imported for ``module``; where it is not installed, the
    ``ModuleNotFoundError`` of ``extra_missing``."""
    try:
        return importlib.import_module(package)
    except ModuleNotFoundError as error:
        raise extra_missing(error, package, module, install) from None
