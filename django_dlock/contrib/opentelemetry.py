"""OpenTelemetry spans of django-dlock: the ``otel`` extra (``opentelemetry-api``),
the only module that imports it. Your project brings the SDK and exporter.

Add ``"django_dlock.contrib.opentelemetry.OpenTelemetryTracing"`` to
INSTALLED_APPS (or call ``install()``). Spans are made from django-dlock's
signals, in the thread that sends them, so they are children of the span
current there (the request's, the task's):

- ``dlock.wait``: a blocking acquisition, over the time it waited;
- ``dlock.acquire``: an acquisition or a refusal, at the moment it happened;
- ``dlock.release``: a release, with how long the lock was held;
- ``dlock.lost``: a holder found its lock lost;
- ``dlock.throttle``: a throttle granted or refused a use.

Attributes: ``dlock.resource``, ``dlock.resource_group``, ``dlock.kind``,
``dlock.outcome`` and, where they apply, ``dlock.wait_seconds``,
``dlock.hold_seconds``, ``dlock.fencing_token``; a throttle's span has
``dlock.key``, ``dlock.resource_group`` (the key's), ``dlock.rate``,
``dlock.outcome`` and ``dlock.retry_after_seconds``. Never the owner: it is a
secret.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from django_dlock.contrib import extra_missing

try:
    import opentelemetry  # noqa: F401 - the imports below need it
except ModuleNotFoundError as error:
    raise extra_missing(
        error, "opentelemetry", __name__, 'pip install "django-dlock[otel]"'
    ) from None

from django.apps import AppConfig
from django.dispatch import Signal
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode, TracerProvider

from django_dlock import signals
from django_dlock.contrib.labels import lock_kind, resource_group
from django_dlock.contrib.receivers import LockSignalReceivers

__all__ = ["LockTracing", "OpenTelemetryTracing", "install"]

INSTRUMENTATION = "django_dlock"


class LockTracing(LockSignalReceivers):
    """Spans of django-dlock's lock operations, made by ``tracer_provider`` (the
    global one by default, also when it is set later) once ``connect()``ed."""

    def __init__(self, tracer_provider: TracerProvider | None = None) -> None:
        self.tracer = trace.get_tracer(INSTRUMENTATION, tracer_provider=tracer_provider)

    def _receivers(self) -> list[tuple[Signal, Any]]:
        return [*super()._receivers(), (signals.throttle_used, self._throttle_used)]

    def _span(
        self,
        name: str,
        resource: str,
        kind: str,
        attributes: dict[str, Any],
        *,
        took: float = 0.0,
        error: bool = False,
    ) -> None:
        """A span that ends now, ``took`` seconds after it began."""
        end = time.time_ns()
        span = self.tracer.start_span(
            name,
            start_time=end - int(took * 1e9),
            attributes={
                "dlock.resource": resource,
                "dlock.resource_group": resource_group(resource),
                "dlock.kind": kind,
                **attributes,
            },
        )
        if error:
            span.set_status(Status(StatusCode.ERROR))
        span.end(end_time=end)

    def _acquired(self, sender: Any, *, lock: Any, **kwargs: Any) -> None:
        attributes = {"dlock.outcome": "acquired", "dlock.fencing_token": lock.fencing_token}
        if kwargs.get("taken_over_from") is not None:
            attributes["dlock.taken_over"] = True  # an expired holder's lock; not who held it
        self._span("dlock.acquire", lock.resource, lock_kind(lock), attributes)

    def _refused(self, sender: Any, *, resource: str, **kwargs: Any) -> None:
        kind = lock_kind(**kwargs)
        self._span("dlock.acquire", resource, kind, {"dlock.outcome": "refused"})

    def _wait_ended(
        self, sender: Any, *, resource: str, waited: float, outcome: str, **kwargs: Any
    ) -> None:
        attributes = {"dlock.outcome": outcome, "dlock.wait_seconds": waited}
        kind = lock_kind(**kwargs)
        self._span("dlock.wait", resource, kind, attributes, took=waited, error=outcome == "error")

    def _released(self, sender: Any, *, lock: Any, forced: bool, **kwargs: Any) -> None:
        attributes = {
            "dlock.outcome": "forced" if forced else "released",
            "dlock.fencing_token": lock.fencing_token,
            "dlock.hold_seconds": max((lock.expires_at - lock.acquired_at).total_seconds(), 0.0),
        }
        self._span("dlock.release", lock.resource, lock_kind(lock), attributes)

    def _lost(self, sender: Any, *, resource: str, reason: str, **kwargs: Any) -> None:
        attributes = {"dlock.outcome": "lost", "dlock.lost_reason": reason}
        kind = lock_kind(**kwargs)
        self._span("dlock.lost", resource, kind, attributes, error=True)

    def _throttle_used(
        self, sender: Any, *, key: str, rate: Any, granted: bool, retry_after: Any, **kwargs: Any
    ) -> None:
        span = self.tracer.start_span(
            "dlock.throttle",
            attributes={
                "dlock.key": key,
                "dlock.resource_group": resource_group(key),
                "dlock.rate": str(rate),
                "dlock.outcome": "granted" if granted else "refused",
                "dlock.retry_after_seconds": retry_after.total_seconds(),
            },
        )
        span.end()


_installed: LockTracing | None = None
_installing = threading.Lock()


def install(tracer_provider: TracerProvider | None = None) -> LockTracing:
    """Make spans of django-dlock's lock operations from now on; once: a second
    call returns the first one's ``LockTracing``."""
    global _installed
    with _installing:
        if _installed is None:
            _installed = LockTracing(tracer_provider)
            _installed.connect()
        return _installed


class OpenTelemetryTracing(AppConfig):
    """``INSTALLED_APPS = [..., "django_dlock.contrib.opentelemetry.OpenTelemetryTracing"]``:
    installs the spans when Django starts."""

    name = "django_dlock.contrib.opentelemetry"
    label = "django_dlock_opentelemetry"
    verbose_name = "django-dlock OpenTelemetry spans"

    def ready(self) -> None:
        install()
