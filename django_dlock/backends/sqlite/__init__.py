"""The sqlite backend of django-dlock."""

from __future__ import annotations

from django_dlock.backends.sqlite.base import SQLiteBackend

__all__ = ["SQLiteBackend"]
