from __future__ import annotations

from django.apps import apps
from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from example_project import admin as example_admin  # noqa: F401 - registers the locked UserAdmin
from example_project.views import index

urlpatterns = [
    path("", index, name="index"),
    path("admin/", admin.site.urls),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="docs"),
    path("api/", include("django_dlock.urls")),
]
# Installed by settings.py when prometheus_client is.
if apps.is_installed("django_dlock.contrib.prometheus"):
    from django_dlock.contrib.prometheus import metrics_view

    # Only your Prometheus should reach it in a real project (see docs/observability.md).
    urlpatterns.append(path("metrics", metrics_view, name="metrics"))
