"""The example project's front page."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


def index(request: HttpRequest) -> HttpResponse:
    """Links to the admin, the API docs and the schema (the admin's "View site")."""
    return render(request, "index.html")
