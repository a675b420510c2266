"""The fault scenarios, each injected while the workers go on. Each records a
``fault`` event saying what the checker must see: ``raise_window`` (every lock
call that ran inside it raised a database error), ``raise_span`` (the call of
``scope`` running at ``t0`` did), ``tell_span`` (the critical section of
``scope`` open at ``t0`` was told that its lock was lost)."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from typing import Any

from tools.torture.asked import Asked
from tools.torture.history import now
from tools.torture.run import Run

FAKETIME_ENV = {"FAKETIME_DONT_FAKE_MONOTONIC": "1"}  # the history's clock stays shared
STOP_TTL = 1.5
READ_ONLY_OWNER = "ro-victim.held"
# The holders struck, a kind each round (the short profile has the first only).
KILLED: list[dict[str, Any]] = [
    {"kind": "exclusive", "resource": "victim:kill", "lock_delay": 0.5},  # the take-over waits
    {"kind": "permit", "limit": 1, "resource": "victim:kill-permit"},  # its permit comes back
    {"kind": "shared", "resource": "victim:kill-shared"},  # a writer waits out the reader
]
STOPPED: list[dict[str, Any]] = [
    {"kind": "leader", "resource": "victim:leader"},  # a deposed leader, its term fenced
    {"kind": "shared", "resource": "victim:stop-shared"},  # its late read refused
    {"kind": "exclusive", "resource": "victim:stop", "renew": True, "auto_renew": True}
    | {"lock_delay": 0.3},  # the take-over waits out its delay too
]


def faketime(offset: str) -> dict[str, Any]:
    return {"prefix": ["faketime", "-f", offset], "env": FAKETIME_ENV}


def read_only_mount(path: str) -> list[str]:
    mount = f"mount --bind -o ro '{path}' '{path}' && exec \"$@\""
    return ["unshare", "--mount", "sh", "-c", mount, "sh"]


def prespawn_probes(run: Run) -> None:
    run.prespawn("probe+", "section", resource="skew:plus", **faketime("+1h"))
    run.prespawn("probe-", "hold", resource="skew:minus", ttl=30.0, body=2.0, **faketime("-1h"))


def prespawn(run: Run, scenarios: set[str]) -> None:
    """Start the victims of the ``scenarios`` of ``run``'s database ahead of
    time: a process takes seconds to start Django on a busy machine."""
    run.prespawn("kill-victim", "hold", rotation=KILLED, ttl=2.0, body=3600)
    run.prespawn("stop-victim", "hold", rotation=STOPPED, ttl=STOP_TTL, body=1.0)
    ro: dict[str, Any] = {
        "resource": "victim:ro",
        "owner": READ_ONLY_OWNER,
        "free": "victim:ro-free",
    }
    if run.server is not None:
        if "read-only" in scenarios:
            run.prespawn("ro-victim", "every_call", **ro)
        run.prespawn("renew-victim", "hold", resource="victim:renew", ttl=1.5, body=2.5,
                     auto_renew=True)  # fmt: skip
        run.prespawn("wait-victim", "wait", resource="victim:wait", timeout=20)
        if "skew" in scenarios:
            for sign, offset in (("+", "+1h"), ("-", "-1h")):
                run.prespawn(f"skew{sign}", "mix", **faketime(offset))
        if "skew probe" in scenarios:
            prespawn_probes(run)
    else:
        assert run.sqlite_file is not None
        run.prespawn("ro-victim", "every_call", prefix=read_only_mount(run.sqlite_file), **ro)
        run.prespawn("writelock-victim", "sqlite_write_lock")


def _take_over(run: Run, victim: dict[str, Any], timeout: float = 30) -> None:
    """The runner takes the lock (once the victim's hold has expired) and
    writes with its token, as the next holder would: a writer after a writer
    or a reader, a permit of the same semaphore, the next leader."""
    assert run.operations is not None
    resource, kind = victim["resource"], victim.get("kind", "exclusive")
    if kind == "permit":
        run.operations.lock_section(resource, 5.0, 0, timeout, False, Asked(limit=victim["limit"]))
    elif kind == "leader":
        run.operations.leader_term(resource, 5.0, 0, timeout=timeout)
    else:
        run.operations.lock_section(resource, 5.0, 0, timeout, False)


def sigkill_holder(run: Run) -> None:
    """1. A holder killed with SIGKILL mid critical section: its hold stays
    until it expires (snapshot), then the next holder gets a larger token (a
    crashed permit comes back; a writer gets in after a crashed reader)."""
    name, victim = run.victim("kill-victim")
    if not run.expect(victim, "ready"):
        raise RuntimeError("the SIGKILL victim never entered its critical section")
    t = run.kill(name)
    struck = run.options[name]
    run.fault(f"sigkill holder ({struck['kind']})", t, now(), scope=name)
    run.snapshot()  # its hold is still there
    _take_over(run, struck)


def sigstop_holder(run: Run) -> None:
    """2. A holder paused (SIGSTOP) for longer than its ttl while another takes
    the lock and writes; resumed, its write (a reader's read) is refused,
    renew and release fail, and it is told (a leader: its term has ended)."""
    name, victim = run.victim("stop-victim")
    if not run.expect(victim, "ready"):
        raise RuntimeError("the SIGSTOP victim never entered its critical section")
    t0 = run.kill(name, signal.SIGSTOP)
    time.sleep(STOP_TTL + 0.5)
    struck = run.options[name]
    _take_over(run, struck)
    run.kill(name, signal.SIGCONT)
    run.finish(victim)
    run.fault(f"sigstop holder ({struck['kind']})", t0, now(), scope=name, tell_span=True)


def terminate_backends(run: Run) -> None:
    """3. A session terminated (pg_terminate_backend, MariaDB's KILL
    CONNECTION): a worker's, the auto-renew thread's and a waiter's."""
    assert run.server is not None
    t0 = now()
    run.server.terminate("torture/w0/main", timeout=5)
    run.fault("terminate worker backend", t0, now(), scope="w0")

    name, victim = run.victim("renew-victim")
    if not run.expect(victim, "ready"):
        raise RuntimeError("the auto-renew victim never entered its critical section")
    t0 = now()
    if run.server.terminate(f"torture/{name}/thread", timeout=5):
        run.fault("terminate renewer backend", t0, now(), scope=name, tell_span=True)
    run.finish(victim)

    assert run.operations is not None
    holder = run.operations
    owner = "runner.waited-for"
    holder.acquire("victim:wait", owner, 30)
    name, waiter = run.victim("wait-victim")
    run.expect(waiter, "ready")
    time.sleep(0.5)  # it is in its waiting loop by now
    t0 = now()
    if run.server.terminate(f"torture/{name}/main", timeout=5):
        run.fault("terminate waiter backend", t0, now(), scope=name, raise_span=True)
    run.finish(waiter)
    holder.release("victim:wait", owner)


def restart(mode: str) -> Callable[[Run], None]:
    def restart_server(run: Run) -> None:
        """4. The server stopped (PostgreSQL fast or immediate; MariaDB SIGTERM
        or SIGKILL) and started again: calls raise while it is down, work
        afterwards, and no committed lock is lost."""
        assert run.server is not None and run.operations is not None
        run.operations.acquire("victim:restart", "runner.restart", 60)
        run.operations.acquire("victim:restart-shared", "runner.restart", 60, Asked(shared=True))
        t0 = now()
        run.server.stop(mode)
        down = now()
        time.sleep(1.0)
        up = now()
        run.server.start()
        run.operations.reset()  # the runner's session died with the server
        run.fault(f"restart ({mode})", t0, now(), raise_window=[down, up])
        run.snapshot()
        run.operations.release("victim:restart", "runner.restart")
        run.operations.release("victim:restart-shared", "runner.restart")

    return restart_server


def clock_skew(run: Run, seconds: float = 4) -> None:
    """5. Processes whose clock is an hour ahead or behind (libfaketime) join
    the mix: on PostgreSQL nothing changes, the database's clock decides."""
    t0 = now()
    names = [run.victim(f"skew{sign}")[0] for sign in "+-"]
    time.sleep(seconds)
    for name in names:
        (run.directory / f"{name}.stop").touch()
    for name in names:
        run.finish(run.processes[name])
    run.fault("clock skew", t0, now())


def skew_probe(run: Run) -> dict[str, bool]:
    """5, the deterministic half: the runner holds a lock in a critical section
    while a process an hour ahead tries to take it; then a process an hour
    behind takes a lock that the runner tries to take. Returns whether each
    took over a lock that was valid by the real clock."""
    assert run.operations is not None
    leave = _hold_section(run, "skew:plus")
    name, probe = run.victim("probe+")
    run.finish(probe)
    leave()
    took = {"+1h": _sections_of(run, name) > 0}
    name, probe = run.victim("probe-")
    run.expect(probe, "ready")
    before = run.operations.sections
    run.operations.manager_section("skew:minus", 5.0, 0)
    took["-1h"] = run.operations.sections > before
    run.finish(probe)
    run.fault("clock skew probe", 0, 0, outcome=took)
    return took


def _hold_section(run: Run, resource: str) -> Callable[[], None]:
    assert run.operations is not None
    operations = run.operations
    owner = "runner.skew"
    t0 = now()
    outcome = operations.acquire(resource, owner, 30)
    if not outcome or not outcome["lock"]:
        raise RuntimeError(f"the runner could not take {resource}")
    cs = operations.enter(resource, outcome["lock"], t0)
    operations.fenced_write(cs, resource, outcome["lock"]["token"])

    def leave() -> None:
        operations.recorder.write(
            "cs_exit", cs=cs, t=now(), expires_at=outcome["lock"]["expires_at"]
        )
        released = operations.release(resource, owner, cs=cs)
        if released and released["result"] != "released":
            operations.told(cs, f"release: {released['result']}")

    return leave


def _sections_of(run: Run, name: str) -> int:
    path = run.directory / f"{name}.jsonl"
    return path.read_text().count('"op":"cs_enter"') if path.exists() else 0


def read_only(run: Run) -> None:
    """6. The database turned read-only: every lock call that has to write
    raises a clear error. PostgreSQL: default_transaction_read_only for the
    whole server; MariaDB: read_only (the workers' user has no right to
    ignore it); SQLite: a process whose view of the file is a read-only bind
    mount."""
    assert run.operations is not None
    held = READ_ONLY_OWNER
    if run.operations.acquire("victim:ro", held, 60) is None:
        # A starved machine (SQLite's write lock held past the busy timeout):
        # without the runner's hold there is nothing for the victim to renew.
        raise RuntimeError("the runner could not take victim:ro before the fault")
    if run.server is not None:
        t0 = now()
        run.server.read_only(True)
        on = now()
        time.sleep(0.5)  # every session has reloaded its configuration by now
        run.finish(run.victim("ro-victim")[1])
        time.sleep(0.5)
        off = now()
        run.server.read_only(False)
        run.fault("read-only", t0, now(), raise_window=[on + 0.5, off])
    else:
        t0 = now()
        name, victim = run.victim("ro-victim")
        run.finish(victim)
        run.fault("read-only", t0, now(), scope=name, raise_window=[t0, now()])
    time.sleep(0.2)
    run.operations.release("victim:ro", held)


def sqlite_write_lock_killed(run: Run) -> None:
    """7. SQLite: a process killed while it holds the write lock, mid-write. The
    others wait for it (busy timeout), then go on; nothing raises."""
    name, victim = run.victim("writelock-victim")
    if not run.expect(victim, "ready"):
        raise RuntimeError("the write-lock victim never took SQLite's write lock")
    t0 = now()
    time.sleep(1.0)
    t = run.kill(name)
    run.fault("killed holding SQLite's write lock", t0, t, scope=name)
