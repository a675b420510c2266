"""The mysql backend of django-dlock."""

from __future__ import annotations

from django_dlock.backends.mysql.base import MySQLBackend

__all__ = ["MySQLBackend"]
