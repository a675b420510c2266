"""django_dlock.contrib.opentelemetry: spans, read from the SDK's in-memory exporter."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from django_dlock import LockExpired, LockNotAcquired, lock
from django_dlock.contrib import labels, opentelemetry
from django_dlock.contrib.opentelemetry import LockTracing
from django_dlock.models import DistributedLock
from tests.utils import import_without

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def declared_groups(settings: Any) -> Iterator[None]:
    settings.DLOCK_RESOURCE_GROUPS = ["job"]
    labels._seen.clear()  # the groups that earlier tests labelled with count towards the cap
    yield
    labels._seen.clear()


@pytest.fixture
def provider() -> TracerProvider:
    return TracerProvider()


@pytest.fixture
def exporter(provider: TracerProvider) -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing = LockTracing(provider)
    tracing.connect()
    yield exporter
    tracing.disconnect()


def spans(exporter: InMemorySpanExporter) -> list[tuple[str, dict[str, Any]]]:
    return [(span.name, dict(span.attributes or {})) for span in exporter.get_finished_spans()]


def test_acquire_and_release(exporter: InMemorySpanExporter) -> None:
    acquired = DistributedLock.objects.acquire("job:42", owner="secret-owner")
    assert acquired is not None
    DistributedLock.objects.release("job:42", owner="secret-owner")
    DistributedLock.objects.acquire("job:42", owner="secret-owner")
    DistributedLock.objects.force_release("job:42")

    [(acquire, a), (release, r), _, (_, forced)] = spans(exporter)
    assert (acquire, release) == ("dlock.acquire", "dlock.release")
    assert a == {
        "dlock.resource": "job:42",
        "dlock.resource_group": "job",
        "dlock.kind": "exclusive",
        "dlock.outcome": "acquired",
        "dlock.fencing_token": acquired.fencing_token,
    }
    assert r["dlock.outcome"] == "released"
    assert 0 <= r["dlock.hold_seconds"] < 10
    assert forced["dlock.outcome"] == "forced"


def test_refused(exporter: InMemorySpanExporter) -> None:
    DistributedLock.objects.acquire("job:42", owner="w1")
    DistributedLock.objects.acquire("job:42", owner="w2")

    assert spans(exporter)[-1] == (
        "dlock.acquire",
        {
            "dlock.resource": "job:42",
            "dlock.resource_group": "job",
            "dlock.kind": "exclusive",
            "dlock.outcome": "refused",
        },
    )


@pytest.mark.django_db(transaction=True)  # lock() refuses to run inside the test's transaction
def test_a_wait_spans_the_time_it_waited(exporter: InMemorySpanExporter) -> None:
    DistributedLock.objects.acquire("job:w", owner="other", ttl=30)

    with pytest.raises(LockNotAcquired), lock("job:w", timeout=0.3):
        pass

    [wait] = [span for span in exporter.get_finished_spans() if span.name == "dlock.wait"]
    attributes: dict[str, Any] = dict(wait.attributes or {})
    assert attributes["dlock.outcome"] == "timeout"
    assert 0.3 <= attributes["dlock.wait_seconds"] < 5
    assert wait.start_time is not None and wait.end_time is not None
    duration = (wait.end_time - wait.start_time) / 1e9
    assert duration == pytest.approx(attributes["dlock.wait_seconds"], abs=0.001)


def test_spans_are_children_of_the_current_span(
    exporter: InMemorySpanExporter, provider: TracerProvider
) -> None:
    with provider.get_tracer("test").start_as_current_span("request") as request:
        DistributedLock.objects.acquire("job:42", owner="w1")

    finished: dict[str, ReadableSpan] = {s.name: s for s in exporter.get_finished_spans()}
    parent = finished["dlock.acquire"].parent
    assert parent is not None
    assert parent.span_id == request.get_span_context().span_id


@pytest.mark.django_db(transaction=True)
def test_a_lost_lock(exporter: InMemorySpanExporter) -> None:
    with pytest.raises(LockExpired), lock("job:lost", ttl=30) as held:
        DistributedLock.objects.force_release("job:lost")
        held.renew()

    [lost] = [span for span in exporter.get_finished_spans() if span.name == "dlock.lost"]
    assert lost.status.status_code is StatusCode.ERROR
    assert dict(lost.attributes or {})["dlock.lost_reason"] == "it was released or purged"


@pytest.mark.django_db(transaction=True)
def test_never_an_owner(exporter: InMemorySpanExporter) -> None:
    owner = "secret-owner-token"
    with lock("job:o", owner=owner, timeout=5):
        DistributedLock.objects.acquire("job:o", owner="someone-else")
    with pytest.raises(LockExpired), lock("job:o2", owner=owner, ttl=30) as held:
        DistributedLock.objects.force_release("job:o2")
        held.renew()

    names = {name for name, _ in spans(exporter)}
    assert names == {"dlock.acquire", "dlock.wait", "dlock.release", "dlock.lost"}
    for _, attributes in spans(exporter):
        assert owner not in repr(attributes)


def test_install_once(monkeypatch: pytest.MonkeyPatch, provider: TracerProvider) -> None:
    monkeypatch.setattr(opentelemetry, "_installed", None)
    tracing = opentelemetry.install(provider)
    try:
        assert opentelemetry.install() is tracing
    finally:
        tracing.disconnect()


def test_the_kind_of_a_shared_hold_and_a_permit(exporter: InMemorySpanExporter) -> None:
    DistributedLock.objects.acquire("doc:1", owner="r1", shared=True)
    DistributedLock.objects.acquire("gpu:1", owner="p1", limit=2)

    assert [attributes["dlock.kind"] for _, attributes in spans(exporter)] == [
        "shared",
        "semaphore",
    ]


def test_the_group_attribute_is_bounded(exporter: InMemorySpanExporter) -> None:
    # The same groups as the metrics' (issue 33): with DLOCK_RESOURCE_GROUPS declared (the
    # fixture), undeclared prefixes are "other".
    for i in range(200):
        DistributedLock.objects.acquire(f"tenant-secret-{i}:job", owner="w1")
    DistributedLock.objects.acquire("job:1", owner="w1")

    groups = [attributes["dlock.resource_group"] for _, attributes in spans(exporter)]
    assert groups == ["other"] * 200 + ["job"]


def test_without_declared_groups_the_attribute_is_the_prefix_up_to_the_cap(
    exporter: InMemorySpanExporter, settings: Any
) -> None:
    del settings.DLOCK_RESOURCE_GROUPS
    for i in range(labels.GROUP_LIMIT + 20):
        DistributedLock.objects.acquire(f"tenant-{i}:job", owner="w1")
    DistributedLock.objects.acquire("tenant-0:job", owner="w2")  # seen: keeps its group

    groups = [attributes["dlock.resource_group"] for _, attributes in spans(exporter)]
    assert groups[: labels.GROUP_LIMIT] == [f"tenant-{i}" for i in range(labels.GROUP_LIMIT)]
    assert groups[labels.GROUP_LIMIT :] == ["other"] * 20 + ["tenant-0"]


def test_throttle_uses(exporter: InMemorySpanExporter) -> None:
    from django_dlock import throttle

    granted = throttle("job:42", rate="1/m").try_use()
    refused = throttle("job:42", rate="1/m").try_use()

    [first, second] = [span for span in spans(exporter) if span[0] == "dlock.throttle"]
    assert first[1] == {
        "dlock.key": "job:42",
        "dlock.resource_group": "job",
        "dlock.rate": "1/m",
        "dlock.outcome": "granted",
        "dlock.retry_after_seconds": 0.0,
    }
    assert second[1]["dlock.outcome"] == "refused"
    assert second[1]["dlock.retry_after_seconds"] == refused.retry_after.total_seconds() > 0
    assert granted


def test_without_opentelemetry_the_import_names_what_to_install() -> None:
    # Not a bare "No module named ...": the error says which extra brings the package.
    error = import_without("django_dlock.contrib.opentelemetry", "opentelemetry")
    assert error.startswith("ModuleNotFoundError: "), error
    assert 'pip install "django-dlock[otel]"' in error, error
