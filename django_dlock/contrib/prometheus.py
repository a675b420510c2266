"""Prometheus metrics of django-dlock: the ``prometheus`` extra
(``prometheus-client``), the only module that imports it.

Add ``"django_dlock.contrib.prometheus.PrometheusMetrics"`` to INSTALLED_APPS
(or call ``install()``), and expose ``prometheus_client``'s default registry,
e.g. with ``metrics_view``. Counters and histograms are fed by django-dlock's
signals, in the process that sends them; the holders and waiters gauges are
read from the lock database when scraped, with one query, cached briefly.
Every metric exists, at zero, from the start (see ``docs/observability.md``).
"""

from __future__ import annotations

import threading
import time
from collections import Counter as Tally
from collections.abc import Iterable
from typing import Any, TypeVar, cast

from django_dlock.contrib import extra_missing

try:
    import prometheus_client  # noqa: F401 - the imports below need it
except ModuleNotFoundError as error:
    raise extra_missing(
        error, "prometheus_client", __name__, 'pip install "django-dlock[prometheus]"'
    ) from None

from django.apps import AppConfig
from django.db import DatabaseError
from django.db.models import Case, CharField, Value, When
from django.dispatch import Signal
from django.http import HttpRequest, HttpResponse
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from django_dlock import signals
from django_dlock.conf import conf
from django_dlock.contrib.labels import EXCLUSIVE, SEMAPHORE, SHARED, lock_kind, resource_group
from django_dlock.contrib.receivers import LockSignalReceivers
from django_dlock.rules import SHARED_HOLDERS
from django_dlock.rules.clock import DatabaseNow

__all__ = ["LockMetrics", "PrometheusMetrics", "install", "metrics_view"]

# Outcomes of an acquisition attempt (the ``outcome`` label of dlock_attempts_total).
ATTEMPT_OUTCOMES = ("acquired", "refused", "timeout", "cancelled", "error")
# Outcomes of a blocking wait (dlock_wait_seconds).
WAIT_OUTCOMES = ("acquired", "timeout", "cancelled", "error")
# How a lock was released (dlock_releases_total).
RELEASE_OUTCOMES = ("released", "forced")
# What a throttle decided for a use (dlock_throttle_uses_total).
THROTTLE_OUTCOMES = ("granted", "refused")
# Seconds: from a wait that found the lock free to one that waited minutes.
WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
# Seconds: from a request's critical section to an hour-long job.
HOLD_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600)
# What the gauges' query calls a waiter's row (the others are holds of a kind).
WAITER = "waiter"
# How long the holders and waiters read from the database serve scrapes, in seconds.
GAUGE_MAX_AGE = 5.0

_Metric = TypeVar("_Metric", Counter, Histogram)


class LockMetrics(LockSignalReceivers):
    """django-dlock's metrics in ``registry``, fed by its signals once ``connect()``ed."""

    def __init__(self, registry: CollectorRegistry, *, gauge_max_age: float = GAUGE_MAX_AGE):
        self.registry = registry
        self._kept: dict[tuple[object, ...], Counter | Histogram] = {}
        labels = ("kind", "group")
        self.attempts = Counter(
            "dlock_attempts",
            "Acquisition attempts: a non-waiting acquire, or one blocking wait, by outcome.",
            (*labels, "outcome"),
            registry=registry,
        )
        self.releases = Counter(
            "dlock_releases",
            "Locks released by their holder (released) or an operator (forced).",
            (*labels, "outcome"),
            registry=registry,
        )
        self.lost = Counter(
            "dlock_lost_leases",
            "Locks their holder found lost: a renewal failed, or the ttl passed without one.",
            labels,
            registry=registry,
        )
        self.wait_seconds = Histogram(
            "dlock_wait_seconds",
            "How long blocking acquisitions (lock(..., timeout=...)) waited, by outcome.",
            (*labels, "outcome"),
            buckets=WAIT_BUCKETS,
            registry=registry,
        )
        self.hold_seconds = Histogram(
            "dlock_hold_seconds",
            "How long released locks were held, from acquisition to release (database clock).",
            labels,
            buckets=HOLD_BUCKETS,
            registry=registry,
        )
        # Labelled by the key's group, as locks are by their resource's (a key
        # names a user or a phone: never a label itself).
        self.throttle_uses = Counter(
            "dlock_throttle_uses",
            "Uses of throttle keys, granted or refused, by the key's group.",
            ("group", "outcome"),
            registry=registry,
        )
        self.gauges = LockGauges(max_age=gauge_max_age)
        registry.register(self.gauges)
        # Pre-registered: each series of the default group ("", the names
        # without ":") exists at zero before the first lock is taken.
        for outcome in ATTEMPT_OUTCOMES:
            self.attempts.labels(EXCLUSIVE, "", outcome)
        for outcome in RELEASE_OUTCOMES:
            self.releases.labels(EXCLUSIVE, "", outcome)
        for outcome in WAIT_OUTCOMES:
            self.wait_seconds.labels(EXCLUSIVE, "", outcome)
        self.lost.labels(EXCLUSIVE, "")
        self.hold_seconds.labels(EXCLUSIVE, "")
        for outcome in THROTTLE_OUTCOMES:
            self.throttle_uses.labels("", outcome)

    def _receivers(self) -> list[tuple[Signal, Any]]:
        return [*super()._receivers(), (signals.throttle_used, self._throttle_used)]

    def _series(self, metric: _Metric, *labels: str) -> _Metric:
        """``metric.labels(*labels)``, kept: prometheus_client's ``labels()``
        checks the values and takes a lock on every call, and every lock
        operation counts in one of a few series (the groups are bounded)."""
        key = (id(metric), *labels)
        series = self._kept.get(key)
        if series is None:
            series = self._kept[key] = metric.labels(*labels)
        return cast(_Metric, series)

    def _acquired(self, sender: Any, *, lock: Any, **kwargs: Any) -> None:
        kind = lock_kind(lock)
        self._series(self.attempts, kind, resource_group(lock.resource), "acquired").inc()

    def _refused(self, sender: Any, *, resource: str, **kwargs: Any) -> None:
        kind = lock_kind(**kwargs)
        self._series(self.attempts, kind, resource_group(resource), "refused").inc()

    def _wait_ended(
        self, sender: Any, *, resource: str, waited: float, outcome: str, **kwargs: Any
    ) -> None:
        kind, group = (
            lock_kind(**kwargs),
            resource_group(resource),
        )
        self._series(self.wait_seconds, kind, group, outcome).observe(waited)
        if outcome != "acquired":  # an acquisition is counted as it is announced
            self._series(self.attempts, kind, group, outcome).inc()

    def _released(self, sender: Any, *, lock: Any, forced: bool, **kwargs: Any) -> None:
        kind, group = lock_kind(lock), resource_group(lock.resource)
        self._series(self.releases, kind, group, "forced" if forced else "released").inc()
        held = (lock.expires_at - lock.acquired_at).total_seconds()
        self._series(self.hold_seconds, kind, group).observe(max(held, 0.0))

    def _lost(self, sender: Any, *, resource: str, reason: str, **kwargs: Any) -> None:
        self._series(self.lost, lock_kind(**kwargs), resource_group(resource)).inc()

    def _throttle_used(self, sender: Any, *, key: str, granted: bool, **kwargs: Any) -> None:
        outcome = "granted" if granted else "refused"
        self._series(self.throttle_uses, resource_group(key), outcome).inc()


class LockGauges(Collector):
    """``dlock_holders`` and ``dlock_waiters``, read from the lock database when
    scraped: one query for both, whose answer serves the scrapes of the next
    ``max_age`` seconds. A group seen once stays, at zero, so that its series
    does not vanish. A database error leaves both without samples (and is logged
    by Django's database layer, not raised into the scrape)."""

    def __init__(self, *, max_age: float = GAUGE_MAX_AGE) -> None:
        self.max_age = max_age
        self._lock = threading.Lock()
        self._read_at = -float("inf")
        self._counts: tuple[Tally[tuple[str, str]], Tally[str]] | None = None
        self._seen_holders: set[tuple[str, str]] = {(EXCLUSIVE, "")}
        self._seen_waiters: set[str] = {""}

    def describe(self) -> Iterable[Metric]:
        # What the registry asks at registration: names, without a query.
        return self._families()

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            if time.monotonic() - self._read_at >= self.max_age:
                try:
                    self._counts = _count_holders_and_waiters()
                except DatabaseError:
                    self._counts = None
                self._read_at = time.monotonic()
            counts = self._counts
        if counts is None:
            return self._families()
        holders, waiters = counts
        self._seen_holders.update(holders)
        self._seen_waiters.update(waiters)
        return self._families(holders, waiters)

    def _families(
        self, holders: Tally[tuple[str, str]] | None = None, waiters: Tally[str] | None = None
    ) -> list[Metric]:
        holding = GaugeMetricFamily(
            "dlock_holders", "Valid holds now, in the lock database.", labels=("kind", "group")
        )
        waiting = GaugeMetricFamily(
            "dlock_waiters", "Live waiters queued now, in the lock database.", labels=("group",)
        )
        if holders is not None and waiters is not None:
            for kind, group in sorted(self._seen_holders):
                holding.add_metric((kind, group), holders[kind, group])
            for group in sorted(self._seen_waiters):
                waiting.add_metric((group,), waiters[group])
        return [holding, waiting]


def _count_holders_and_waiters() -> tuple[Tally[tuple[str, str]], Tally[str]]:
    """The valid holds by (kind, group) and the live waiters by group: one query,
    a row per hold or waiter (grouped here, since the group is a Python function)."""
    from django_dlock.models import DistributedLock, LockHold, LockWaiter

    now = DatabaseNow()
    text = CharField()
    exclusive = (  # a resource's row; a shared resource's is the header of its holds
        DistributedLock.objects.filter(expires_at__gt=now)
        .exclude(owner__in=["", SHARED_HOLDERS])
        .annotate(what=Value(EXCLUSIVE, output_field=text))
    )
    shared = (
        LockHold.objects.using(conf.DATABASE)
        .filter(expires_at__gt=now)
        .annotate(
            what=Case(
                When(limit__isnull=True, then=Value(SHARED)),
                default=Value(SEMAPHORE),
                output_field=text,
            )
        )
    )
    queued = (
        LockWaiter.objects.using(conf.DATABASE)
        .filter(expires_at__gt=now)
        .annotate(what=Value(WAITER, output_field=text))
    )
    rows = [part.order_by().values_list("resource", "what") for part in (exclusive, shared, queued)]
    holders: Tally[tuple[str, str]] = Tally()
    waiters: Tally[str] = Tally()
    for resource, what in rows[0].union(*rows[1:], all=True):
        if what == WAITER:
            waiters[resource_group(resource)] += 1
        else:
            holders[what, resource_group(resource)] += 1
    return holders, waiters


_installed: dict[int, LockMetrics] = {}
_installing = threading.Lock()


def install(
    registry: CollectorRegistry = REGISTRY, *, gauge_max_age: float = GAUGE_MAX_AGE
) -> LockMetrics:
    """Register django-dlock's metrics in ``registry`` (prometheus_client's
    default) and feed them from its signals; once per registry: a second call
    returns the first one's metrics."""
    with _installing:
        metrics = _installed.get(id(registry))
        if metrics is None:
            metrics = _installed[id(registry)] = LockMetrics(registry, gauge_max_age=gauge_max_age)
            metrics.connect()
        return metrics


def metrics_view(request: HttpRequest) -> HttpResponse:
    """prometheus_client's default registry in its text format. Mount it where
    only your Prometheus reaches, e.g. ``path("metrics", metrics_view)`` behind
    an IP allow-list: it says which locks your project takes and how often."""
    # The format the scraper asks for (Prometheus's text or OpenMetrics), as
    # prometheus_client's own exposition servers choose it.
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    return HttpResponse(encoder(REGISTRY), content_type=content_type)


class PrometheusMetrics(AppConfig):
    """``INSTALLED_APPS = [..., "django_dlock.contrib.prometheus.PrometheusMetrics"]``:
    installs the metrics in prometheus_client's default registry when Django starts."""

    name = "django_dlock.contrib.prometheus"
    label = "django_dlock_prometheus"
    verbose_name = "django-dlock Prometheus metrics"

    def ready(self) -> None:
        install()
