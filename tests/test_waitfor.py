"""Who waits for whom, where operators look: ``dlock show --graph`` and the
queue on a lock's page in the admin (``django_dlock.waitfor``). Owners are
never shown; a cycle is named as a deadlock."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from django_dlock import lock
from django_dlock.locking.deadlock import declare_holding
from django_dlock.locking.queue import Queue
from django_dlock.models import DistributedLock
from django_dlock.rules.claim import Claim
from django_dlock.waitfor import wait_for_graph
from tests.utils import run_in_thread, wait_for

Locks = DistributedLock.objects
# The cycle of ``a_deadlock``, from its oldest ticket.
DEADLOCK = "'one' holds g:a and waits for g:b; 'two' holds g:b and waits for g:a"


def dlock(*args: str) -> str:
    out = StringIO()
    call_command("dlock", *args, stdout=out)
    return out.getvalue()


def graph_of(resource: str) -> list[str]:
    """The lines ``dlock show RESOURCE --graph`` adds to ``show``."""
    lines = dlock("show", resource, "--graph").splitlines()
    return lines[lines.index("wait-for graph:") :]


def hold(resource: str, label: str) -> None:
    assert Locks.acquire(resource, owner=f"secret-{label}", ttl=60, label=label) is not None


def queue(resource: str, label: str, *held: str, priority: int = 0) -> int:
    """A ``lock()`` waiter's ticket for ``resource``, joined through the queue,
    whose thread holds ``held`` (each as ``secret-LABEL``). Tickets joined in
    the same tick of the database's clock (a millisecond on SQLite) fall in any
    order: a higher ``priority`` puts one before the others."""
    claim = Claim(
        resource,
        owner=f"waiting-{label}",
        duration=timedelta(seconds=30),
        label=label,
        priority=priority,
    )
    ticket, _ = Queue("default").join(claim, 60, channel="", pid=None)
    if held:
        declare_holding("default", ticket, [(name, f"secret-{label}") for name in held])
    return ticket


def change_url(resource: str) -> str:
    pk = Locks.get(resource=resource).pk
    return reverse("admin:django_dlock_distributedlock_change", args=[pk])


def waiters_on_page(response: Any) -> list[dict[str, str]]:
    table = response.context["waiters"]
    return [dict(zip(table.headers, row, strict=True)) for row in table.rows]


@pytest.fixture
def a_deadlock() -> int:
    """'one' holds g:a and waits for g:b, 'two' holds g:b and waits for g:a;
    behind 'two' an unlabelled waiter that holds nothing, and 'three', whose
    g:c is no longer held. The unlabelled waiter's ticket."""
    hold("g:a", "one")
    hold("g:b", "two")
    queue("g:b", "one", "g:a", priority=3)
    queue("g:a", "two", "g:b", priority=2)
    unlabelled = queue("g:a", "", priority=1)
    queue("g:a", "three", "g:c")
    return unlabelled


@pytest.mark.django_db
def test_show_graph_follows_the_edges_and_names_the_deadlock(a_deadlock: int) -> None:
    out = dlock("show", "g:a", "--graph")

    assert graph_of("g:a") == [
        "wait-for graph:",
        "  g:a: held by 'one' (waiting for g:b)",
        "    1. 'two' holds g:b",
        f"    2. ticket {a_deadlock} holds nothing",
        "    3. 'three' holds g:c (not held now)",
        "  g:b: held by 'two' (waiting for g:a)",
        "    1. 'one' holds g:a",
        "  g:c: not held",
        f"  deadlock: {DEADLOCK}",
    ]
    assert "secret-" not in out and "waiting-" not in out
    # Before the graph, what ``show`` always says; without --graph, only that.
    assert out.startswith(dlock("show", "g:a"))
    assert "wait-for graph" not in dlock("show", "g:a")
    # The same cycle from the other side, each resource once.
    assert graph_of("g:b")[1:4] == [
        "  g:b: held by 'two' (waiting for g:a)",
        "    1. 'one' holds g:a",
        "  g:a: held by 'one' (waiting for g:b)",
    ]
    assert graph_of("g:b")[-1] == graph_of("g:a")[-1]


@pytest.mark.django_db
def test_show_graph_of_a_quiet_resource_and_the_limits() -> None:
    assert graph_of("g:none") == ["wait-for graph:", "  g:none: not held", "  no deadlock"]
    hold("chain:0", "h0")
    for n in range(6):  # chain:n waits for chain:n+1
        queue(f"chain:{n}", f"w{n + 1}", f"chain:{n + 1}")
    hold("chain:1", "w1")  # only chain:1 is really held; the others' claims are not valid
    found = wait_for_graph("chain:0", using="default", levels=2)
    assert [node.resource for node in found.nodes] == ["chain:0", "chain:1", "chain:2"]
    assert found.not_followed == ("chain:3",)
    assert found.deadlocks == ()
    assert graph_of("chain:0")[-2:] == ["  further away, not shown: chain:4", "  no deadlock"]


@pytest.mark.django_db
def test_list_graph_names_the_waiters_that_hold_and_the_deadlock(a_deadlock: int) -> None:
    lines = dlock("list", "--graph").splitlines()

    assert lines[0].split() == ["RESOURCE", "KIND", "LABEL", "TOKEN", "EXPIRES", "WAITERS"]
    assert [line.split()[0] for line in lines[1:3]] == ["g:a", "g:b"]
    assert lines[3:] == [
        "waiting while holding:",
        "  g:a: 'two' holds g:b",
        "  g:a: 'three' holds g:c (not held now)",
        "  g:b: 'one' holds g:a",
        f"  deadlock: {DEADLOCK}",
    ]
    assert dlock("list", "--prefix", "g:b", "--graph").splitlines()[2:] == [
        "waiting while holding:",
        "  g:b: 'one' holds g:a",
        f"  deadlock: {DEADLOCK}",
    ]
    assert "waiting while holding" not in dlock("list")
    assert "secret-" not in "\n".join(lines)


@pytest.mark.django_db
def test_list_graph_with_nothing_held() -> None:
    assert dlock("list", "--graph") == (
        "No locks held.\nwaiting while holding:\n  none\n  no deadlock\n"
    )


def test_graph_is_an_option_of_show_and_list() -> None:
    from django.core.management import execute_from_command_line

    with pytest.raises(SystemExit) as exited:
        execute_from_command_line(["manage.py", "dlock", "release", "g:a", "--graph"])
    assert exited.value.code == 2


@pytest.mark.django_db
def test_the_admin_shows_what_each_waiter_holds_and_the_deadlock(
    a_deadlock: int, admin_client: Client, client: Client
) -> None:
    response = admin_client.get(change_url("g:a"))

    rows = waiters_on_page(response)
    assert [(row["label"], row["holds"], row["waits behind"]) for row in rows] == [
        ("two", "g:b", "'one' (waiting for g:b)"),
        ("—", "—", "'one' (waiting for g:b)"),
        ("three", "g:c (not held now)", "'one' (waiting for g:b)"),
    ]
    assert response.context["waiters"].deadlocks == [DEADLOCK]
    html = response.content.decode()
    assert "Deadlock: &#x27;one&#x27; holds g:a and waits for g:b" in html
    # Staff who may not see owners see the same, and no owner.
    user = User.objects.create_user("viewer", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_distributedlock"))
    client.force_login(user)
    page = client.get(change_url("g:a"))
    assert [row["holds"] for row in waiters_on_page(page)] == [row["holds"] for row in rows]
    assert b"secret-" not in page.content and b"waiting-" not in page.content


@pytest.mark.django_db
def test_the_admin_adds_no_columns_to_a_queue_without_held_locks(admin_client: Client) -> None:
    hold("plain", "holder")
    queue("plain", "waiter")
    queue("elsewhere", "other", "x")  # a waiter that holds a lock, of another queue

    response = admin_client.get(change_url("plain"))

    table = response.context["waiters"]
    assert table.headers == [
        "position",
        "label",
        "owner",
        "asks for",
        "will hold it for",
        "woken",
        "ticket expires",
    ]
    assert table.deadlocks == []


@pytest.mark.django_db(transaction=True)
def test_threads_waiting_in_lock_while_holding_show_as_a_chain(admin_client: Client) -> None:
    """'one' holds chain:b and waits for chain:c, which cron holds (and waits
    for nothing); 'two' holds chain:a and waits for chain:b. A chain, no cycle;
    both get their locks once cron releases."""
    hold("chain:c", "cron")

    def hold_then_wait(first: str, second: str, label: str) -> Any:
        def work(outcome: dict[str, Any]) -> int:
            with lock(first, ttl=30, label=label), lock(second, ttl=30, timeout=20, label=label):
                return 1

        return run_in_thread(work)

    one = hold_then_wait("chain:b", "chain:c", "one")
    wait_for(lambda: "holds chain:b" in dlock("show", "chain:c", "--graph"), what="one queued")
    two = hold_then_wait("chain:a", "chain:b", "two")
    expected = [
        "wait-for graph:",
        "  chain:a: held by 'two' (waiting for chain:b)",
        "  chain:b: held by 'one' (waiting for chain:c)",
        "    1. 'two' holds chain:a",
        "  chain:c: held by 'cron'",
        "    1. 'one' holds chain:b",
        "  no deadlock",
    ]
    wait_for(lambda: graph_of("chain:a") == expected, what="the chain", seconds=15)

    rows = waiters_on_page(admin_client.get(change_url("chain:b")))
    assert [(row["label"], row["holds"], row["waits behind"]) for row in rows] == [
        ("two", "chain:a", "'one' (waiting for chain:c)")
    ]
    rows = waiters_on_page(admin_client.get(change_url("chain:c")))
    assert [(row["label"], row["holds"], row["waits behind"]) for row in rows] == [
        ("one", "chain:b", "—")
    ]

    assert Locks.release("chain:c", owner="secret-cron").name == "RELEASED"
    for thread in (one, two):
        thread["thread"].join(timeout=30)
        assert thread.get("result") == 1, thread.get("error")
    assert graph_of("chain:a")[1:] == ["  chain:a: not held", "  no deadlock"]
