"""``manage.py dlock``: list, show, release, and every bad argument.

``run`` with real child processes is in test_command_dlock_run.py.
"""

from __future__ import annotations

import builtins
import re
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command, execute_from_command_line

from django_dlock.models import DistributedLock, LockWaiter
from django_dlock.rules.clock import now_plus
from tests.test_kinds import REFUSED
from tests.utils import make_delayed_lock, make_lock


def dlock(*args: str) -> str:
    out = StringIO()
    call_command("dlock", *args, stdout=out)
    return out.getvalue()


def held(resource: str) -> bool:
    return DistributedLock.objects.active().filter(resource=resource).exists()


def queue_waiter(resource: str, owner: str = "waiter-1") -> None:
    """A live waiter of ``lock(..., timeout=...)`` queued for ``resource``."""
    LockWaiter.objects.create(
        resource=resource, owner=owner, expires_at=now_plus(timedelta(seconds=60))
    )


@pytest.mark.django_db
class TestList:
    def test_lists_held_locks_with_waiters_and_never_owners(self) -> None:
        a = make_lock("job:a", "owner-secret-a")
        make_lock("job:b", "owner-secret-b", expires_in=30)
        make_lock("job:old", "owner-secret-old", expires_in=-5)
        queue_waiter("job:a")
        queue_waiter("job:a", "waiter-2")

        lines = dlock("list").splitlines()

        assert lines[0].split() == ["RESOURCE", "KIND", "LABEL", "TOKEN", "EXPIRES", "WAITERS"]
        assert lines[1].split()[:5] == ["job:a", "exclusive", "-", str(a.fencing_token), "in"]
        assert lines[1].split()[-1] == "2"
        assert lines[2].split()[0] == "job:b" and lines[2].split()[-1] == "0"
        assert len(lines) == 3  # the expired lock is not held
        assert "owner-secret" not in "\n".join(lines)

    def test_all_adds_expired_and_released_locks(self) -> None:
        make_lock("job:active")
        make_lock("job:expired", expires_in=-600)
        make_lock("job:released")
        DistributedLock.objects.release("job:released", owner="worker-1")

        lines = dlock("list", "--all").splitlines()[1:]

        by_resource = {line.split()[0]: line for line in lines}
        assert set(by_resource) == {"job:active", "job:expired", "job:released"}
        assert "expired 10 min ago" in by_resource["job:expired"]
        assert "released" in by_resource["job:released"]

    def test_prefix_is_case_sensitive(self) -> None:
        make_lock("job:1")
        make_lock("JOB:2")
        make_lock("report:3")

        lines = dlock("list", "--prefix", "job:").splitlines()[1:]

        assert [line.split()[0] for line in lines] == ["job:1"]

    def test_show_owners_adds_the_owner_column(self) -> None:
        make_lock("job:a", "owner-secret-a")

        lines = dlock("list", "--show-owners").splitlines()

        assert lines[0].split()[-1] == "OWNER"
        assert lines[1].split()[-1] == "owner-secret-a"

    def test_a_resource_with_waiters_and_no_holder_is_listed_free(self) -> None:
        queue_waiter("job:between-holders")

        lines = dlock("list").splitlines()

        assert lines[1].split() == ["job:between-holders", "-", "-", "-", "free", "1"]

    def test_nothing_held(self) -> None:
        assert dlock("list") == "No locks held.\n"
        assert dlock("list", "--prefix", "job:") == "No locks held under 'job:'.\n"


@pytest.mark.django_db
class TestShow:
    def test_a_held_lock(self) -> None:
        lock = make_lock("job:42", "owner-secret")
        queue_waiter("job:42")

        out = dlock("show", "job:42")

        lines = out.splitlines()
        assert lines[0] == "job:42: held (exclusive)"
        assert f"fencing token {lock.fencing_token}" in lines[1]
        assert lines[1].startswith("  label -, ")
        assert "expires in 59 s" in lines[1] or "expires in 1 min" in lines[1]
        assert lines[2] == "waiters: 1"
        assert "owner-secret" not in out

    def test_the_queue_is_listed_in_order_with_owners_only_when_asked(self) -> None:
        make_lock("job:42", "owner-secret")
        for owner, label, limit in [("w-1", "nightly", None), ("w-2", "", None), ("w-3", "x", 4)]:
            LockWaiter.objects.create(
                resource="job:42",
                owner=owner,
                label=label,
                limit=limit,
                expires_at=now_plus(timedelta(seconds=60)),
            )

        lines = dlock("show", "job:42").splitlines()

        start = lines.index("waiters: 3")
        assert [line.split(",")[0] for line in lines[start + 1 :]] == [
            "  1. 'nightly'",
            "  2. ticket " + str(LockWaiter.objects.get(owner="w-2").pk),
            "  3. 'x'",
        ]
        assert "asks for exclusive" in lines[start + 1]
        assert "asks for semaphore of 4" in lines[start + 3]
        assert "w-1" not in "\n".join(lines)
        owners = dlock("show", "job:42", "--show-owners").splitlines()
        assert owners[start + 1].endswith(", owner w-1")

    def test_owner_only_with_show_owners(self) -> None:
        make_lock("job:42", "owner-secret")

        assert "owner owner-secret" in dlock("show", "job:42", "--show-owners")

    def test_a_free_lock_says_its_last_token(self) -> None:
        lock = make_lock("job:42")
        DistributedLock.objects.release("job:42", owner="worker-1")

        out = dlock("show", "job:42")

        assert out.startswith("job:42: free (released ")
        assert f"last fencing token {lock.fencing_token})" in out
        assert out.endswith("waiters: 0\n")

    def test_never_locked(self) -> None:
        assert dlock("show", "job:none") == (
            "job:none: free (never locked, or purged)\nwaiters: 0\n"
        )


@pytest.mark.django_db
class TestRelease:
    def test_asks_first_and_releases_on_yes(self, monkeypatch: pytest.MonkeyPatch) -> None:
        lock = make_lock("job:42", "owner-secret")
        questions: list[str] = []

        def answer(question: str) -> str:
            questions.append(question)
            return "y"

        monkeypatch.setattr(builtins, "input", answer)

        out = dlock("release", "job:42")

        assert out == f"Released the lock on 'job:42' (fencing token {lock.fencing_token}).\n"
        assert not held("job:42")
        [question] = questions
        assert question.startswith("Release the lock on 'job:42' held by an unlabelled holder")
        assert question.endswith("? [y/N] ")
        assert "owner-secret" not in question

    @pytest.mark.parametrize("answer", ["", "n", "no", "whatever"])
    def test_anything_but_yes_keeps_it(self, monkeypatch: pytest.MonkeyPatch, answer: str) -> None:
        make_lock("job:42")
        monkeypatch.setattr(builtins, "input", lambda q: answer)

        with pytest.raises(CommandError, match="Not released: the lock on 'job:42' is still held"):
            dlock("release", "job:42")
        assert held("job:42")

    def test_no_answer_when_stdin_is_closed(self, monkeypatch: pytest.MonkeyPatch) -> None:
        make_lock("job:42")

        def closed(question: str) -> str:
            raise EOFError

        monkeypatch.setattr(builtins, "input", closed)

        with pytest.raises(CommandError, match="pass --yes to release without asking"):
            dlock("release", "job:42")
        assert held("job:42")

    def test_yes_does_not_ask(self, monkeypatch: pytest.MonkeyPatch) -> None:
        make_lock("job:42")
        monkeypatch.setattr(builtins, "input", lambda q: pytest.fail("asked"))

        dlock("release", "job:42", "--yes")

        assert not held("job:42")

    def test_the_next_holder_gets_a_larger_token(self) -> None:
        lock = make_lock("job:42")

        dlock("release", "job:42", "--yes")

        again = DistributedLock.objects.acquire("job:42", owner="worker-2")
        assert again is not None and again.fencing_token > lock.fencing_token

    def test_nothing_to_release(self) -> None:
        make_lock("job:old", expires_in=-1)

        with pytest.raises(CommandError, match="The lock on 'job:old' is not held"):
            dlock("release", "job:old", "--yes")

    def test_holder_must_match_a_label(self) -> None:
        DistributedLock.objects.acquire("job:42", owner="w1", label="web-1 pid 7")

        with pytest.raises(
            CommandError,
            match=r"No holder of 'job:42' has the label 'web-3' \(its holders' labels: web-1 pid 7\)",
        ):
            dlock("release", "job:42", "--holder", "web-3", "--yes")
        assert held("job:42")

    def test_holder_releases_that_reader_only(self, monkeypatch: pytest.MonkeyPatch) -> None:
        manager = DistributedLock.objects
        manager.acquire("doc:7", owner="r1", ttl=60, shared=True, label="reader one")
        manager.acquire("doc:7", owner="r2", ttl=60, shared=True, label="reader two")
        questions: list[str] = []

        def answer(question: str) -> str:
            questions.append(question)
            return "yes"

        monkeypatch.setattr(builtins, "input", answer)

        dlock("release", "doc:7", "--holder", "reader two")

        assert [hold.owner for hold in manager.holders("doc:7")] == ["r1"]
        assert questions[0].startswith("Release the lock on 'doc:7' held by 'reader two'")

    def test_every_holder_after_one_question(self, monkeypatch: pytest.MonkeyPatch) -> None:
        manager = DistributedLock.objects
        for n in (1, 2, 3):
            manager.acquire("gpu", owner=f"w{n}", ttl=60, limit=4, label=f"worker {n}")
        questions: list[str] = []

        def answer(question: str) -> str:
            questions.append(question)
            return "y"

        monkeypatch.setattr(builtins, "input", answer)

        out = dlock("release", "gpu")

        assert questions == [
            "Release the 3 holds of 'gpu' (labels: worker 1, worker 2, worker 3)? [y/N] "
        ]
        assert out.count("Released the lock on 'gpu'") == 3
        assert manager.holders("gpu") == []


# -- bad arguments: one sentence, a non-zero exit, no traceback, nothing changed ----------

BAD_ARGUMENTS = [
    ([], "the following arguments are required: {list,show,release,run}"),
    (["lock"], "argument {list,show,release,run}: invalid choice: 'lock'"),
    (["list", "--prefix", ""], "argument --prefix: A prefix must be 1 to 255 characters long"),
    (["list", "--prefix", "a b"], "argument --prefix: A prefix may not contain whitespace"),
    (["list", "--owners"], "unrecognized arguments: --owners"),
    (["show"], "the following arguments are required: RESOURCE"),
    (["show", "a/b"], "argument RESOURCE: A resource may not contain '/'"),
    (["show", "x" * 256], "argument RESOURCE: A resource must be 1 to 255 characters long"),
    (["release", "job:42", "--holder", ""], "argument --holder: must be 1 to 255 characters"),
    (
        ["release", "job:42", "--holder", "a\x1bb"],
        "argument --holder: A label may not contain control",
    ),
    (
        ["run", "job:42", "--label", "\u202eevil", "--", "true"],
        "argument --label: A label may not contain invisible formatting characters",
    ),
    (["run", "job:42"], "give the command to run after --"),
    (["run", "job:42", "--"], "the command to run is missing after --"),
    (["run", "--", "true"], "the following arguments are required: RESOURCE"),
    (["run", "a b", "--", "true"], "argument RESOURCE: A resource may not contain whitespace"),
    (
        ["run", "job:42", "--wait", "-1", "--", "true"],
        "argument --wait: must be a number of seconds from 0",
    ),
    (
        ["run", "job:42", "--wait", "soon", "--", "true"],
        "argument --wait: must be a number of seconds from 0",
    ),
    (
        ["run", "job:42", "--wait", "inf", "--", "true"],
        "argument --wait: must be a number of seconds from 0",
    ),
    (["run", "job:42", "--ttl", "0", "--", "true"], "argument --ttl: A ttl must be greater than 0"),
    (
        ["run", "job:42", "--ttl", "nan", "--", "true"],
        "argument --ttl: A ttl must be greater than 0",
    ),
    (
        ["run", "job:42", "--ttl", "1e9", "--", "true"],
        "argument --ttl: A ttl must be greater than 0 and at most 86400",
    ),
    (
        ["run", "job:42", "--conflict-exit-code", "256", "--", "true"],
        "argument --conflict-exit-code: must be a whole number from 0 to 255",
    ),
    (
        ["run", "job:42", "--conflict-exit-code", "x", "--", "true"],
        "argument --conflict-exit-code: must be a whole number from 0 to 255",
    ),
    (
        ["run", "job:42", "--min-hold", "-5", "--", "true"],
        "argument --min-hold: must be a number of seconds from 0",
    ),
    (
        ["run", "job:42", "--kill-after", "1e10", "--", "true"],
        "argument --kill-after: must be a number of seconds from 0",
    ),
    (
        ["run", "job:42", "--label", "", "--", "true"],
        "argument --label: must be 1 to 255 characters long",
    ),
    (
        ["run", "job:42", "--limit", "0", "--", "true"],
        "argument --limit: A limit must be a whole number of permits from 1",
    ),
    (
        ["run", "job:42", "--limit", "two", "--", "true"],
        "argument --limit: A limit must be a whole number of permits from 1 to 1000000. Got 'two'.",
    ),
    (
        ["run", "job:42", "--shared", "--limit", "2", "--", "true"],
        "argument --limit: not allowed with argument --shared",
    ),
    (["run", "job:42", "--exclusive", "--", "true"], "unrecognized arguments: --exclusive"),
    (
        ["run", "job:42", "--lock-delay", "-1", "--", "true"],
        "argument --lock-delay: A lock_delay must be at least 0 and at most",
    ),
    (
        ["run", "job:42", "--lock-delay", "soon", "--", "true"],
        "argument --lock-delay: A lock_delay must be at least 0",
    ),
    (
        ["run", "job:42", "--shared", "--lock-delay", "5", "--", "true"],
        "argument --lock-delay: not allowed with argument --shared",
    ),
    (
        ["run", "job:42", "--limit", "2", "--lock-delay", "5", "--", "true"],
        "argument --lock-delay: not allowed with argument --limit",
    ),
    # The refused kinds of tests/test_kinds.py that a command line can spell: the same sentence.
    *(
        (
            ["run", "job:42", "--limit", str(flags["limit"]), "--", "true"],
            f"argument --limit: {message} Got {str(flags['limit'])!r}.",
        )
        for flags, message in REFUSED
        if type(flags["limit"]) in (int, float)
    ),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("args", "message"), BAD_ARGUMENTS)
def test_bad_arguments_through_call_command(args: list[str], message: str) -> None:
    make_lock("job:42")

    with pytest.raises(CommandError) as error:
        dlock(*args)

    assert message in str(error.value)
    assert held("job:42")


@pytest.mark.django_db
@pytest.mark.parametrize(("args", "message"), BAD_ARGUMENTS)
def test_bad_arguments_on_the_command_line(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    make_lock("job:42")

    with pytest.raises(SystemExit) as exit_:
        execute_from_command_line(["manage.py", "dlock", *args])

    assert exit_.value.code == 2
    captured = capsys.readouterr()
    assert message in captured.err
    assert "Traceback" not in captured.err
    # A usage line, then the error: one sentence.
    assert captured.err.splitlines()[-1].startswith("manage.py dlock")
    assert captured.out == ""
    assert held("job:42")


@pytest.mark.django_db
def test_release_is_announced_as_forced_and_spares_a_new_holder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from django_dlock.signals import lock_released

    make_lock("job:42", "owner-1")
    seen: list[dict[str, object]] = []

    def record(sender: object, **kwargs: object) -> None:
        seen.append(kwargs)

    lock_released.connect(record)
    try:
        dlock("release", "job:42", "--yes")
    finally:
        lock_released.disconnect(record)
    assert [(k["owner"], k["forced"]) for k in seen] == [("owner-1", True)]

    # The operator was asked about owner-1's hold; owner-2 took the lock since: it stays.
    make_lock("job:43", "owner-1")

    def meanwhile(question: str) -> str:
        DistributedLock.objects.force_release("job:43")
        DistributedLock.objects.acquire("job:43", owner="owner-2")
        return "y"

    monkeypatch.setattr(builtins, "input", meanwhile)
    assert "had ended meanwhile: nothing released" in dlock("release", "job:43")
    assert DistributedLock.objects.active().get(resource="job:43").owner == "owner-2"


@pytest.mark.django_db
def test_kinds_labels_and_hold_counts_in_list_and_show() -> None:
    manager = DistributedLock.objects
    manager.acquire("job:r", owner="w1", reentrant=True, label="cron-3 pid 88")
    manager.acquire("job:r", owner="w1", reentrant=True, label="cron-3 pid 88")
    manager.acquire("doc:7", owner="r1", shared=True)
    manager.acquire("gpu", owner="p1", limit=4, label="web-1")

    cells = [re.split(r"\s{2,}", line) for line in dlock("list").splitlines()[1:]]
    rows = {row[0]: row[1:3] for row in cells}

    assert rows == {
        "doc:7": ["shared", "-"],
        "gpu": ["semaphore of 4", "web-1"],
        "job:r": ["exclusive, held 2 times", "cron-3 pid 88"],
    }
    assert dlock("show", "gpu").splitlines()[0] == "gpu: held (semaphore, 1 of 4 permits)"
    assert dlock("show", "doc:7").splitlines()[0] == "doc:7: held (shared, 1 reader)"
    assert "held 2 times (reentrant)" in dlock("show", "job:r")


@pytest.mark.django_db
@pytest.mark.parametrize("force", [False, True], ids=["expired", "force-released"])
def test_a_delayed_resource_is_shown_delayed_until_available_not_free(force: bool) -> None:
    lock = make_delayed_lock("job:delayed", lock_delay=30 * 60, force=force)
    make_lock("job:free", expires_in=-5)
    assert lock.available_at is not None

    out = dlock("show", "job:delayed")

    first = out.splitlines()[0]
    assert first.startswith("job:delayed: delayed (delayed, available in 29 min, at ")
    assert f"{lock.available_at:%Y-%m-%dT%H:%M:%SZ}" in first
    assert "lock delay of 30 min" in first
    assert f"last fencing token {lock.fencing_token})" in first
    assert "free" not in out
    # Listed without --all (it is not free); the expired lock without a delay is not.
    lines = dlock("list").splitlines()[1:]
    assert [line.split()[0] for line in lines] == ["job:delayed"]
    assert "delayed, available in 29 min" in lines[0]
    # Nothing to release: nobody holds it.
    with pytest.raises(CommandError, match="is not held"):
        dlock("release", "job:delayed", "--yes")


@pytest.mark.django_db
def test_show_says_the_lock_delay_of_a_held_lock() -> None:
    assert DistributedLock.objects.acquire("job:held", "worker-1", ttl=60, lock_delay=45)

    assert "lock delay 45 s" in dlock("show", "job:held").splitlines()[1]
