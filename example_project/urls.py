from __future__ import annotations

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from django_dlock.contrib.prometheus import metrics_view
from example_project.views import index

urlpatterns = [
    path("", index, name="index"),
    path("admin/", admin.site.urls),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="docs"),
    path("api/", include("django_dlock.urls")),
    # Only your Prometheus should reach it in a real project (see docs/observability.md).
    path("metrics", metrics_view, name="metrics"),
]
