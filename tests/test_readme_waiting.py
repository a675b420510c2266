"""The README's examples of ``lock()`` and Celery run as written.

Each ```python block that starts with ``# example: <name>`` is executed with
stand-ins for the project's own functions, then exercised.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

import pytest
from django.test import AsyncRequestFactory, RequestFactory

from django_dlock import LockExpired
from django_dlock.models import DistributedLock
from tests.test_async import close_connections  # noqa: F401 - a fixture

pytestmark = pytest.mark.django_db(transaction=True)

README = Path(__file__).resolve().parent.parent / "README.md"
Locks = DistributedLock.objects


def example(name: str, **stand_ins: Any) -> dict[str, Any]:
    blocks = re.findall(r"```python\n(# example: ([^\n]+)\n.*?)```", README.read_text(), re.S)
    [code] = [code for code, title in blocks if title == name]
    namespace: dict[str, Any] = {"__name__": f"readme_{name.replace(' ', '_')}", **stand_ins}
    exec(compile(code, f"README.md ({name})", "exec"), namespace)  # noqa: S102 - our README
    return namespace


def test_script_example_writes_each_batch_with_the_fencing_token() -> None:
    written: list[tuple[str, int]] = []
    namespace = example(
        "script",
        export_batches=lambda: ["a", "b"],
        write_batch=lambda batch, fencing_token: written.append((batch, fencing_token)),
        logger=logging.getLogger("readme"),
    )
    namespace["nightly_export"]()
    assert [batch for batch, _ in written] == ["a", "b"]
    assert written[0][1] >= 1
    assert not Locks.active().exists()


def test_script_example_does_nothing_when_another_host_is_at_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    Locks.acquire("export:nightly", "other-host", ttl=60)
    called: list[str] = []

    def export_batches() -> list[str]:
        called.append("export")
        return []

    namespace = example(
        "script",
        export_batches=export_batches,
        write_batch=None,
        logger=logging.getLogger("readme"),
    )
    # The example waits 10 s; a test need not.
    namespace["lock"] = _with_short_timeout(namespace["lock"])
    with caplog.at_level(logging.INFO, logger="readme"):
        namespace["nightly_export"]()
    assert called == []
    assert "Another host is exporting" in caplog.text


def _with_short_timeout(lock: Any) -> Any:
    def short(resource: str, **kwargs: Any) -> Any:
        return lock(resource, **{**kwargs, "timeout": 0.2})

    return short


def test_view_example() -> None:
    rebuilt: list[str] = []
    namespace = example(
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

    view = example("async view", refresh=refresh)["refresh_cache"]
    response = await view(AsyncRequestFactory().get("/"), "home")
    assert response.status_code == 200
    assert refreshed == ["home"]
    assert not await Locks.active().aexists()


def test_decorator_example() -> None:
    posted: list[bool] = []

    def post_invoices() -> None:
        posted.append(Locks.active().filter(resource="billing:close-month").exists())

    example("decorator", post_invoices=post_invoices)["close_month"]()
    assert posted == [True]


def test_celery_example_passes_the_fencing_token() -> None:
    pytest.importorskip("celery")
    reports: list[tuple[str, int]] = []
    task = example(
        "celery", write_report=lambda month, fencing_token: reports.append((month, fencing_token))
    )["build_monthly_report"]
    task("2026-05")  # run in this process, as a worker would
    [(month, token)] = reports
    assert month == "2026-05"
    assert token == Locks.get(resource="report:2026-05").fencing_token


def test_lock_expired_is_exported() -> None:
    assert issubclass(LockExpired, Exception)
