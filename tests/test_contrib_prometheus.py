"""django_dlock.contrib.prometheus: the metrics, scraped from a registry of the test's own."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("prometheus_client")

from django.db import DatabaseError, connections
from django.test import RequestFactory
from django.test.utils import CaptureQueriesContext
from prometheus_client import CollectorRegistry, generate_latest

from django_dlock import LockExpired, LockNotAcquired, lock
from django_dlock.checks import check_settings
from django_dlock.contrib import labels, prometheus
from django_dlock.contrib.labels import GROUP_LIMIT, OTHER, resource_group
from django_dlock.contrib.prometheus import LockMetrics
from django_dlock.models import DistributedLock
from tests.test_command_dlock import queue_waiter
from tests.utils import import_without

pytestmark = pytest.mark.django_db

# The groups these tests tell apart: every other prefix is "other" (without the setting, every
# prefix is a group, up to GROUP_LIMIT a process).
GROUPS = ["job", "report", "doc", "gpu", "order"]


@pytest.fixture(autouse=True)
def declared_groups(settings: Any) -> Iterator[None]:
    settings.DLOCK_RESOURCE_GROUPS = GROUPS
    labels._seen.clear()  # the groups the default or a DLOCK_RESOURCE_GROUP gave earlier tests
    yield
    labels._seen.clear()


@pytest.fixture
def registry() -> Iterator[CollectorRegistry]:
    registry = CollectorRegistry()
    metrics = LockMetrics(registry, gauge_max_age=0)
    metrics.connect()
    yield registry
    metrics.disconnect()


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, {"kind": "exclusive", **labels})


def scrape(registry: CollectorRegistry) -> str:
    return generate_latest(registry).decode()


def test_every_metric_exists_at_zero_before_the_first_lock(registry: CollectorRegistry) -> None:
    text = scrape(registry)

    for outcome in ("acquired", "refused", "timeout", "cancelled", "error"):
        assert f'dlock_attempts_total{{group="",kind="exclusive",outcome="{outcome}"}} 0.0' in text
    for outcome in ("released", "forced"):
        assert f'dlock_releases_total{{group="",kind="exclusive",outcome="{outcome}"}} 0.0' in text
    for outcome in ("acquired", "timeout", "cancelled", "error"):
        assert (
            f'dlock_wait_seconds_count{{group="",kind="exclusive",outcome="{outcome}"}} 0.0' in text
        )
    assert 'dlock_lost_leases_total{group="",kind="exclusive"} 0.0' in text
    assert 'dlock_hold_seconds_count{group="",kind="exclusive"} 0.0' in text
    assert 'dlock_holders{group="",kind="exclusive"} 0.0' in text
    assert 'dlock_waiters{group=""} 0.0' in text


def test_acquisitions_refusals_and_releases_by_group(registry: CollectorRegistry) -> None:
    manager = DistributedLock.objects
    assert manager.acquire("job:1", owner="w1") is not None
    assert manager.acquire("job:2", owner="w1") is not None
    assert manager.acquire("job:1", owner="w2") is None
    assert manager.acquire("report:may", owner="w2") is not None
    manager.release("job:1", owner="w1")
    manager.force_release("job:2")

    assert value(registry, "dlock_attempts_total", group="job", outcome="acquired") == 2
    assert value(registry, "dlock_attempts_total", group="job", outcome="refused") == 1
    assert value(registry, "dlock_attempts_total", group="report", outcome="acquired") == 1
    assert value(registry, "dlock_releases_total", group="job", outcome="released") == 1
    assert value(registry, "dlock_releases_total", group="job", outcome="forced") == 1
    assert value(registry, "dlock_hold_seconds_count", group="job") == 2
    held = value(registry, "dlock_hold_seconds_sum", group="job")
    assert held is not None and 0 <= held < 10


@pytest.mark.django_db(transaction=True)  # lock() refuses to run inside the test's transaction
def test_waits_by_outcome_and_timeouts_as_attempts(registry: CollectorRegistry) -> None:
    with lock("job:w", timeout=5):  # free: a wait of about nothing
        pass
    DistributedLock.objects.acquire("job:w", owner="other", ttl=30)
    with pytest.raises(LockNotAcquired), lock("job:w", timeout=0.3):
        pass

    assert value(registry, "dlock_wait_seconds_count", group="job", outcome="acquired") == 1
    assert value(registry, "dlock_wait_seconds_count", group="job", outcome="timeout") == 1
    waited = value(registry, "dlock_wait_seconds_sum", group="job", outcome="timeout")
    assert waited is not None and 0.3 <= waited < 5
    assert value(registry, "dlock_attempts_total", group="job", outcome="timeout") == 1
    # The wait that got the lock is counted once, as an acquisition.
    assert value(registry, "dlock_attempts_total", group="job", outcome="acquired") == 2


@pytest.mark.django_db(transaction=True)
def test_a_non_waiting_lock_that_is_held_is_a_refusal(registry: CollectorRegistry) -> None:
    DistributedLock.objects.acquire("job:r", owner="other", ttl=30)

    with pytest.raises(LockNotAcquired), lock("job:r"):
        pass

    assert value(registry, "dlock_attempts_total", group="job", outcome="refused") == 1


@pytest.mark.django_db(transaction=True)
def test_lost_leases(registry: CollectorRegistry) -> None:
    with pytest.raises(LockExpired), lock("job:lost", ttl=30) as held:
        DistributedLock.objects.force_release("job:lost")
        held.renew()

    assert value(registry, "dlock_lost_leases_total", group="job") == 1


def test_never_whole_resource_names_nor_owners(registry: CollectorRegistry) -> None:
    DistributedLock.objects.acquire("order:98765", owner="secret-owner-token")
    DistributedLock.objects.acquire("nightly-98765", owner="secret-owner-token")
    DistributedLock.objects.acquire("order:98765", owner="someone-else")

    text = scrape(registry)

    assert "98765" not in text and "secret-owner-token" not in text
    assert value(registry, "dlock_attempts_total", group="order", outcome="acquired") == 1
    # A name without ":" has no group: its series is the ungrouped one.
    assert value(registry, "dlock_attempts_total", group="", outcome="acquired") == 1


def group_values(registry: CollectorRegistry) -> set[str]:
    """Every ``group`` label value of every series in ``registry``."""
    return {
        sample.labels["group"]
        for metric in registry.collect()
        for sample in metric.samples
        if "group" in sample.labels
    }


def test_names_that_clients_choose_make_a_bounded_number_of_groups(
    registry: CollectorRegistry,
) -> None:
    # Issue 33: 40 POSTs of "tenant-secret-$i:job" made 43 groups, with the tenants' names in them.
    manager = DistributedLock.objects
    for i in range(200):
        assert manager.acquire(f"tenant-secret-{i}:job", owner="w1") is not None
    manager.acquire("job:1", owner="w1")  # a declared group keeps its name
    manager.acquire("report:may", owner="w1")
    manager.release("tenant-secret-7:job", owner="w1")

    text = scrape(registry)

    assert "tenant" not in text and "secret" not in text
    assert group_values(registry) == {"", "job", "report", OTHER}
    assert value(registry, "dlock_attempts_total", group=OTHER, outcome="acquired") == 200
    assert value(registry, "dlock_attempts_total", group="job", outcome="acquired") == 1
    assert value(registry, "dlock_releases_total", group=OTHER, outcome="released") == 1
    assert value(registry, "dlock_holders", group=OTHER) == 199
    assert value(registry, "dlock_holders", group="job") == 1


def test_without_declared_groups_the_group_is_the_prefix_up_to_the_cap(
    registry: CollectorRegistry, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # The contract: by default the group is the part before the first ":".
    del settings.DLOCK_RESOURCE_GROUPS
    DistributedLock.objects.acquire("job:1", owner="w1")
    DistributedLock.objects.acquire("nightly", owner="w1")

    assert resource_group("job:1") == "job"
    assert value(registry, "dlock_attempts_total", group="job", outcome="acquired") == 1
    assert value(registry, "dlock_attempts_total", group="", outcome="acquired") == 1

    # Bounded all the same (issue 33): names that clients choose give at most GROUP_LIMIT groups.
    for i in range(150):
        DistributedLock.objects.acquire(f"tenant-secret-{i}:job", owner="w1")

    groups = group_values(registry)
    assert len(groups - {"", OTHER}) == GROUP_LIMIT
    assert "job" in groups  # seen before the limit: keeps its name
    assert "tenant-secret-0" in groups and f"tenant-secret-{GROUP_LIMIT}" not in groups
    # "job" took one of the GROUP_LIMIT places: 99 tenants got their own group, 51 are "other".
    assert value(registry, "dlock_attempts_total", group=OTHER, outcome="acquired") == 150 - (
        GROUP_LIMIT - 1
    )
    assert resource_group("job:2") == "job"
    warnings = [r for r in caplog.records if "resource groups in this process" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].levelname == "WARNING"


def whole_name(resource: str) -> str:
    return resource  # unbounded: what GROUP_LIMIT is for


def test_a_group_function_is_capped_with_one_warning(
    registry: CollectorRegistry, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    settings.DLOCK_RESOURCE_GROUP = whole_name

    for i in range(GROUP_LIMIT + 50):
        DistributedLock.objects.acquire(f"tenant-secret-{i}:job", owner="w1")
    DistributedLock.objects.acquire("tenant-secret-0:job", owner="w2")  # seen: keeps its group

    groups = group_values(registry)
    assert len(groups - {"", OTHER}) == GROUP_LIMIT
    assert "tenant-secret-0:job" in groups and f"tenant-secret-{GROUP_LIMIT}:job" not in groups
    assert value(registry, "dlock_attempts_total", group=OTHER, outcome="acquired") == 50
    refused = value(
        registry, "dlock_attempts_total", group="tenant-secret-0:job", outcome="refused"
    )
    assert refused == 1
    warnings = [r for r in caplog.records if "resource groups in this process" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].levelname == "WARNING"


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("job", "must be None or a list of group names"),
        (["job", ""], "must list group names"),
        (["job:42"], "must list group names"),
        ([42], "must list group names"),
    ],
)
def test_a_wrong_groups_setting_is_e502(settings: Any, setting: object, message: str) -> None:
    settings.DLOCK_RESOURCE_GROUPS = setting

    [error] = check_settings()

    assert error.id == "django_dlock.E502"
    assert message in error.msg


def test_declared_groups_pass_the_checks(settings: Any) -> None:
    for setting in (["job"], ("job", "report"), {"job"}, [], None):
        settings.DLOCK_RESOURCE_GROUPS = setting
        assert check_settings() == []


def first_two_characters(resource: str) -> str:
    return resource[:2]


NOT_A_FUNCTION = "job"


def failing_group(resource: str) -> str:
    raise RuntimeError("boom")


def test_a_setting_names_the_group_function(registry: CollectorRegistry, settings: Any) -> None:
    settings.DLOCK_RESOURCE_GROUP = "tests.test_contrib_prometheus.first_two_characters"
    DistributedLock.objects.acquire("ab-123", owner="w1")

    assert value(registry, "dlock_attempts_total", group="ab", outcome="acquired") == 1
    assert check_settings() == []

    settings.DLOCK_RESOURCE_GROUP = first_two_characters  # the function itself works too
    assert resource_group("xy:1") == "xy"


def test_a_failing_group_function_never_fails_the_lock_operation(
    registry: CollectorRegistry, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    settings.DLOCK_RESOURCE_GROUP = failing_group

    assert DistributedLock.objects.acquire("job:1", owner="w1") is not None

    assert value(registry, "dlock_attempts_total", group="", outcome="acquired") == 1
    assert "DLOCK_RESOURCE_GROUP failed" in caplog.text


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("tests.no_such_module.group", "names nothing that can be imported"),
        ("tests.test_contrib_prometheus.no_such_function", "names nothing that can be imported"),
        ("tests.test_contrib_prometheus.NOT_A_FUNCTION", "names something that is not a function"),
        (42, "must be a function or its dotted path"),
    ],
)
def test_a_wrong_group_setting_is_e501(settings: Any, setting: object, message: str) -> None:
    settings.DLOCK_RESOURCE_GROUP = setting

    [error] = check_settings()

    assert error.id == "django_dlock.E501"
    assert message in error.msg


def test_holders_and_waiters_are_read_from_the_database_in_one_query(
    registry: CollectorRegistry,
) -> None:
    DistributedLock.objects.acquire("job:1", owner="w1")
    DistributedLock.objects.acquire("job:2", owner="w1")
    DistributedLock.objects.acquire("report:1", owner="w1")
    DistributedLock.objects.acquire("job:3", owner="w1")
    DistributedLock.objects.release("job:3", owner="w1")
    queue_waiter("job:1")
    queue_waiter("job:1", "waiter-2")

    with CaptureQueriesContext(connections["default"]) as queries:
        scrape(registry)

    assert len(queries) == 1
    assert value(registry, "dlock_holders", group="job") == 2
    assert value(registry, "dlock_holders", group="report") == 1
    assert registry.get_sample_value("dlock_waiters", {"group": "job"}) == 2

    DistributedLock.objects.release("job:1", owner="w1")
    DistributedLock.objects.release("job:2", owner="w1")
    assert value(registry, "dlock_holders", group="job") == 0  # seen once: stays, at zero


def test_gauges_are_cached_between_scrapes() -> None:
    registry = CollectorRegistry()
    LockMetrics(registry, gauge_max_age=3600)
    assert registry.get_sample_value("dlock_holders", {"kind": "exclusive", "group": ""}) == 0

    DistributedLock.objects.acquire("solo", owner="w1")

    with CaptureQueriesContext(connections["default"]) as queries:
        cached = registry.get_sample_value("dlock_holders", {"kind": "exclusive", "group": ""})
    assert (cached, len(queries)) == (0, 0)


def test_a_database_error_leaves_the_gauges_without_samples(
    registry: CollectorRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail() -> None:
        raise DatabaseError("down")

    monkeypatch.setattr(prometheus, "_count_holders_and_waiters", fail)

    text = scrape(registry)

    assert "# TYPE dlock_holders gauge" in text
    assert "dlock_holders{" not in text
    assert 'dlock_attempts_total{group="",kind="exclusive",outcome="acquired"} 0.0' in text


def test_install_once_per_registry_and_the_view(monkeypatch: pytest.MonkeyPatch) -> None:
    registry = CollectorRegistry()
    monkeypatch.setattr(prometheus, "_installed", {})
    monkeypatch.setattr(prometheus, "REGISTRY", registry)
    metrics = prometheus.install(registry)
    try:
        assert prometheus.install(registry) is metrics
        DistributedLock.objects.acquire("job:v", owner="w1")

        response = prometheus.metrics_view(RequestFactory().get("/metrics"))

        assert response["Content-Type"].startswith("text/plain; version=")
        body = response.content.decode()
        assert 'dlock_attempts_total{group="job",kind="exclusive",outcome="acquired"} 1.0' in body

        openmetrics = RequestFactory().get("/metrics", HTTP_ACCEPT="application/openmetrics-text")
        response = prometheus.metrics_view(openmetrics)
        assert response["Content-Type"].startswith("application/openmetrics-text")
        assert response.content.decode().endswith("# EOF\n")
    finally:
        metrics.disconnect()


@pytest.mark.django_db(transaction=True)
def test_a_cancelled_async_wait(registry: CollectorRegistry) -> None:
    import asyncio

    DistributedLock.objects.acquire("job:a", owner="other", ttl=30)

    async def wait_then_cancel() -> None:
        async def waiting() -> None:
            async with lock("job:a", timeout=30):
                pass

        task = asyncio.ensure_future(waiting())
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(wait_then_cancel())

    assert value(registry, "dlock_attempts_total", group="job", outcome="cancelled") == 1
    assert value(registry, "dlock_wait_seconds_count", group="job", outcome="cancelled") == 1


def test_kinds(registry: CollectorRegistry) -> None:
    manager = DistributedLock.objects
    manager.acquire("doc:1", owner="r1", shared=True)
    manager.acquire("doc:1", owner="r2", shared=True)
    assert manager.acquire("doc:1", owner="w1") is None  # a writer beside readers
    manager.acquire("gpu:1", owner="p1", limit=2)
    manager.acquire("gpu:1", owner="p2", limit=2)
    assert manager.acquire("gpu:1", owner="p3", limit=2) is None
    manager.acquire("job:1", owner="w1")
    manager.release("doc:1", owner="r1")

    def sample(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert sample("dlock_attempts_total", kind="shared", group="doc", outcome="acquired") == 2
    assert sample("dlock_attempts_total", kind="exclusive", group="doc", outcome="refused") == 1
    assert sample("dlock_attempts_total", kind="semaphore", group="gpu", outcome="acquired") == 2
    assert sample("dlock_attempts_total", kind="semaphore", group="gpu", outcome="refused") == 1
    assert sample("dlock_releases_total", kind="shared", group="doc", outcome="released") == 1
    # The gauges: each reader and permit is a holder; a shared resource's row is not.
    assert sample("dlock_holders", kind="shared", group="doc") == 1
    assert sample("dlock_holders", kind="semaphore", group="gpu") == 2
    assert sample("dlock_holders", kind="exclusive", group="job") == 1
    assert sample("dlock_holders", kind="exclusive", group="doc") is None


def test_throttle_uses_by_group_and_outcome(registry: CollectorRegistry) -> None:
    from django_dlock import throttle

    text = scrape(registry)
    for outcome in ("granted", "refused"):
        assert f'dlock_throttle_uses_total{{group="",outcome="{outcome}"}} 0.0' in text

    for key in ("order:1", "order:1", "order:2", "user-7:mail"):
        throttle(key, rate="1/m").try_use()

    uses = {
        (group, outcome): registry.get_sample_value(
            "dlock_throttle_uses_total", {"group": group, "outcome": outcome}
        )
        for group in ("order", "other")
        for outcome in ("granted", "refused")
    }
    assert uses == {
        ("order", "granted"): 2,
        ("order", "refused"): 1,
        ("other", "granted"): 1,
        ("other", "refused"): None,
    }
    assert "order:1" not in scrape(registry)


def test_without_prometheus_the_import_names_what_to_install() -> None:
    # Not a bare "No module named ...": the error says which extra brings the package.
    error = import_without("django_dlock.contrib.prometheus", "prometheus_client")
    assert error.startswith("ModuleNotFoundError: "), error
    assert 'pip install "django-dlock[prometheus]"' in error, error
