"""The documentation's examples run as written: each ```python block of the README or of a page
under docs/ that starts with ``# example: <name>`` is executed with stand-ins for the project's
own functions and models, then exercised (usage, recipes, Celery, the quickstart)."""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
import types
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import AsyncRequestFactory, RequestFactory

from django_dlock import LockExpired, LockLost
from django_dlock.models import DistributedLock
from tests.docs_utils import run_example
from tests.test_async import close_connections  # noqa: F401 - a fixture
from tests.testapp.models import Counter, Product
from tests.utils import run_in_thread, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

Locks = DistributedLock.objects


@pytest.fixture
def project_modules(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The recipes import the reader's models (``shop.models``, ``deploy.models``): these are
    the test app's."""
    for package, module, names in (
        ("shop", "shop.models", {"Product": Product}),
        ("deploy", "deploy.models", {"AppliedChange": Counter}),  # a model with a unique name
    ):
        monkeypatch.setitem(sys.modules, package, types.ModuleType(package))
        models = types.ModuleType(module)
        vars(models).update(names)
        monkeypatch.setitem(sys.modules, module, models)
    yield


def _join(*outcomes: dict[str, Any]) -> list[Any]:
    """Wait for threads started by ``run_in_thread``; their results (raising their errors)."""
    for outcome in outcomes:
        outcome["thread"].join(30)
        assert not outcome["thread"].is_alive()
        if "error" in outcome:
            raise outcome["error"]
    return [outcome["result"] for outcome in outcomes]


# -- the quickstart (also run in a new project by tests/test_docs.py) ----------------------------


def test_quickstart_example_runs_once_at_a_time() -> None:
    posted: list[tuple[str, int]] = []
    close_month = run_example(
        "quickstart",
        post_invoices=lambda month, fencing_token: posted.append((month, fencing_token)),
    )["close_month"]
    assert close_month("2026-05") is True
    assert posted[0][0] == "2026-05" and posted[0][1] >= 1

    Locks.acquire("billing:close:2026-06", "another-process", ttl=60)
    assert close_month("2026-06") is False
    assert len(posted) == 1


def test_quickstart_manager_example_generates_the_owner_and_releases() -> None:
    seen: list[str] = []

    def run_job(job_id: int, fencing_token: int) -> None:
        [held] = Locks.active().filter(resource=f"job:{job_id}")
        seen.append(held.owner)

    run_job_once = run_example("quickstart manager", run_job=run_job)["run_job_once"]
    run_job_once(42)
    run_job_once(42)
    assert len(seen) == 2 and seen[0] != seen[1]  # a new owner each time
    assert not Locks.active().exists()

    Locks.acquire("job:7", "another-process", ttl=60)
    run_job_once(7)
    assert len(seen) == 2


# -- usage ----------------------------------------------------------------------------------------


def test_script_example_writes_each_batch_with_the_fencing_token() -> None:
    written: list[tuple[str, int]] = []
    namespace = run_example(
        "script",
        export_batches=lambda: ["a", "b"],
        write_batch=lambda batch, fencing_token: written.append((batch, fencing_token)),
        logger=logging.getLogger("docs"),
    )
    namespace["nightly_export"]()
    assert [batch for batch, _ in written] == ["a", "b"]
    assert written[0][1] >= 1
    assert not Locks.active().exists()


def test_script_example_does_nothing_at_once_when_another_host_is_at_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    Locks.acquire("export:nightly", "other-host", ttl=60)
    called: list[str] = []

    def export_batches() -> list[str]:
        called.append("export")
        return []

    namespace = run_example(
        "script", export_batches=export_batches, write_batch=None, logger=logging.getLogger("docs")
    )
    started = time.monotonic()
    with caplog.at_level(logging.INFO, logger="docs"):
        namespace["nightly_export"]()
    assert time.monotonic() - started < 2  # it does not wait for the other host
    assert called == []
    assert "Another host is exporting" in caplog.text


def test_view_example() -> None:
    rebuilt: list[str] = []
    namespace = run_example(
        "view", rebuild=lambda name, fencing_token: rebuilt.append(f"{name}:{fencing_token}")
    )
    view = namespace["rebuild_index"]
    response = view(RequestFactory().post("/"), "products")
    assert response.status_code == 200
    body = json.loads(response.content)
    assert body["rebuilt"] == "products"
    assert rebuilt == [f"products:{body['fencing_token']}"]

    Locks.acquire("index:products", "another-request", ttl=60)
    response = view(RequestFactory().post("/"), "products")
    assert response.status_code == 409


@pytest.mark.asyncio
@pytest.mark.usefixtures("close_connections")
async def test_async_view_example() -> None:
    refreshed: list[str] = []

    async def refresh(key: str, fencing_token: int) -> None:
        assert await Locks.active().filter(resource=f"cache:{key}").aexists()
        refreshed.append(key)

    view = run_example("async view", refresh=refresh)["refresh_cache"]
    response = await view(AsyncRequestFactory().get("/"), "home")
    assert response.status_code == 200
    assert refreshed == ["home"]
    assert not await Locks.active().aexists()


def test_decorator_example() -> None:
    posted: list[bool] = []

    def post_invoices() -> None:
        posted.append(Locks.active().filter(resource="billing:close-month").exists())

    run_example("decorator", post_invoices=post_invoices)["close_month"]()
    assert posted == [True]


def test_who_holds_example() -> None:
    namespace = run_example("who holds")
    holders_of, in_progress = namespace["holders_of"], namespace["reports_in_progress"]
    assert holders_of("job:42") == []
    held = Locks.acquire("job:42", "worker-1", ttl=60)
    assert held is not None
    [answer] = holders_of("job:42")
    assert answer.startswith("worker-1 until ") and f"(token {held.fencing_token})" in answer
    Locks.release("job:42", "worker-1")
    assert holders_of("job:42") == []

    Locks.acquire("report:a", "w", ttl=60)
    Locks.acquire("report:b", "w", ttl=60)
    Locks.release("report:b", "w")
    Locks.acquire("job:report:c", "w", ttl=60)
    assert in_progress() == ["report:a"]


# -- recipes --------------------------------------------------------------------------------------


@pytest.mark.usefixtures("project_modules")
def test_stock_recipe_never_oversells() -> None:
    Product.objects.create(sku="mug", stock=5)
    reserved: list[str] = []
    sell = run_example("stock", reserve_payment=lambda sku, quantity: reserved.append(sku))["sell"]
    buyers = [run_in_thread(lambda outcome: sell("mug", 1)) for _ in range(8)]
    sold = _join(*buyers)
    assert sorted(sold) == [False] * 3 + [True] * 5
    assert len(reserved) == 5
    assert Product.objects.get(sku="mug").stock == 0


@pytest.mark.usefixtures("project_modules")
def test_stock_recipe_writes_nothing_for_a_holder_whose_lock_was_taken_over() -> None:
    Product.objects.create(sku="mug", stock=5)
    paused: list[Any] = []

    def reserve_payment(sku: str, quantity: int) -> None:
        if not paused:  # the first seller is paused here past its ttl; another takes over
            paused.append(True)
            Locks.force_release(f"stock:{sku}")
            assert Locks.acquire(f"stock:{sku}", owner="another", ttl=30) is not None

    sell = run_example("stock", reserve_payment=reserve_payment)["sell"]
    with pytest.raises(LockLost):
        sell("mug", 1)
    assert Product.objects.get(sku="mug").stock == 5


@pytest.mark.usefixtures("project_modules")
def test_stock_recipe_with_tokens_refuses_a_holder_whose_lock_was_taken_over() -> None:
    Product.objects.create(sku="mug", stock=5)
    namespace = run_example("stock with tokens", reserve_payment=lambda sku, quantity: None)
    # A holder takes the lock, then is paused past its ttl; an operator (or the expiry) frees
    # it, and another process sells with a larger token.
    paused = Locks.acquire("stock:mug", ttl=30)
    assert paused is not None
    Locks.force_release("stock:mug")
    assert namespace["sell"]("mug", 1) is True
    # The paused holder wakes up and writes with its old token: refused, nothing written.
    with pytest.raises(namespace["StaleLock"]):
        namespace["take_from_stock"]("mug", 1, paused.fencing_token)
    assert Product.objects.get(sku="mug").stock == 4


@pytest.mark.usefixtures("project_modules")
def test_the_guarded_write_example_writes_only_under_the_lock() -> None:
    Product.objects.create(sku="mug", stock=1)
    recount = run_example("guarded write", count_the_shelf=lambda sku: 7)["recount"]
    recount("mug")
    assert Product.objects.get(sku="mug").stock == 7

    def taken_over_meanwhile(sku: str) -> int:
        Locks.force_release(f"stock:{sku}")
        assert Locks.acquire(f"stock:{sku}", owner="another", ttl=30) is not None
        return 9

    recount = run_example("guarded write", count_the_shelf=taken_over_meanwhile)["recount"]
    with pytest.raises(LockLost):
        recount("mug")
    assert Product.objects.get(sku="mug").stock == 7


def test_cron_recipe_runs_the_job_once_across_hosts(caplog: pytest.LogCaptureFixture) -> None:
    started, ran = threading.Event(), []

    def build_report(fencing_token: int) -> None:
        ran.append(fencing_token)
        started.set()

    namespace = run_example("cron", build_report=build_report, logger=logging.getLogger("docs"))
    namespace["MIN_HOLD"] = 1.0  # a test need not hold for a minute
    first_host = run_in_thread(lambda outcome: namespace["nightly_report"]())
    assert started.wait(10)
    _join(first_host)  # done at once: the host does not wait out MIN_HOLD
    # The job is done, but the lock is kept: a second host, whose cron started later,
    # finds it held and gives up at once.
    with caplog.at_level(logging.INFO, logger="docs"):
        namespace["nightly_report"]()
    assert "Another host is running the nightly report" in caplog.text
    assert len(ran) == 1
    wait_for(lambda: not Locks.active().exists(), 5, "the lock to expire after MIN_HOLD")


def test_scheduler_recipe_has_one_leader_and_hands_over_when_it_stops() -> None:
    leaders: list[str] = []

    def run_due_jobs(fencing_token: int) -> None:
        leaders.append(threading.current_thread().name)

    namespace = run_example("scheduler", run_due_jobs=run_due_jobs)
    namespace["TICK"] = 0.05
    stop_first, stop_second = threading.Event(), threading.Event()

    def scheduler(name: str, stop: threading.Event) -> dict[str, Any]:
        def run(outcome: dict[str, Any]) -> None:
            threading.current_thread().name = name
            namespace["run_scheduler"](stop)

        return run_in_thread(run)

    first = scheduler("first", stop_first)
    _wait_until(lambda: "first" in leaders)
    [leader] = Locks.holders("scheduler:leader")
    assert leader.label == namespace["LABEL"] and " pid " in leader.label
    second = scheduler("second", stop_second)
    time.sleep(0.5)  # the second stands by meanwhile
    assert set(leaders) == {"first"}
    stop_first.set()
    _join(first)
    _wait_until(lambda: "second" in leaders)
    stop_second.set()
    _join(second)
    switch = leaders.index("second")
    assert set(leaders[:switch]) == {"first"} and set(leaders[switch:]) == {"second"}
    assert not Locks.active().exists()


@pytest.mark.usefixtures("project_modules")
def test_config_change_recipe_applies_once_and_the_others_wait_for_it() -> None:
    applied: list[int] = []

    def apply_change(name: str, fencing_token: int) -> None:
        time.sleep(0.2)  # the others queue meanwhile
        applied.append(fencing_token)

    apply_once = run_example("config change", apply_change=apply_change)["apply_once"]
    hosts = [run_in_thread(lambda outcome: apply_once("feature-flags-v2")) for _ in range(3)]
    assert sorted(_join(*hosts)) == [False, False, True]
    assert len(applied) == 1
    assert Counter.objects.filter(name="feature-flags-v2").exists()
    assert apply_once("feature-flags-v2") is False


def _wait_until(condition: Any, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


# -- Celery -----------------------------------------------------------------------------------------


def test_celery_example_passes_the_fencing_token() -> None:
    pytest.importorskip("celery")
    reports: list[tuple[str, int]] = []
    task = run_example(
        "celery", write_report=lambda month, fencing_token: reports.append((month, fencing_token))
    )["build_monthly_report"]
    task("2026-05")  # run in this process, as a worker would
    [(month, token)] = reports
    assert month == "2026-05"
    assert token == Locks.get(resource="report:2026-05").fencing_token


def test_lock_expired_is_exported() -> None:
    assert issubclass(LockExpired, Exception)
