"""The URLs of a project that serves neither the admin nor the lock API."""

from __future__ import annotations

from django.urls import URLPattern

urlpatterns: list[URLPattern] = []
