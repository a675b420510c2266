"""The HTTP API (Django REST framework): the only code of django-dlock that imports DRF."""

from __future__ import annotations
