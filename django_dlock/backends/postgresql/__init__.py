"""The postgresql backend of django-dlock."""

from __future__ import annotations

from django_dlock.backends.postgresql.base import PostgreSQLBackend

__all__ = ["PostgreSQLBackend"]
