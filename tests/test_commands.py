"""``manage.py purge_locks``."""

from __future__ import annotations

import logging
from io import StringIO

import pytest
from django.core.management import CommandError, call_command, execute_from_command_line
from django.db import transaction

from django_dlock.models import DistributedLock, FencingFloor
from tests import workers_purge
from tests.utils import database_settings, make_lock, run_in_processes, spawn


def purge(*args: str) -> str:
    out = StringIO()
    call_command("purge_locks", *args, stdout=out)
    return out.getvalue()


def remaining() -> list[str]:
    return sorted(DistributedLock.objects.values_list("resource", flat=True))


@pytest.mark.django_db
class TestPurge:
    def test_deletes_expired_and_released_locks_and_keeps_active_ones(self) -> None:
        make_lock("job:active")
        make_lock("job:expired", expires_in=-1)
        make_lock("job:released")
        DistributedLock.objects.release("job:released", owner="worker-1")

        assert purge() == "Deleted 2 lock(s)\n"
        assert remaining() == ["job:active"]
        assert purge() == "Deleted 0 lock(s)\n"

    def test_dry_run_counts_and_deletes_nothing(self) -> None:
        make_lock("job:active")
        make_lock("job:expired-1", expires_in=-1)
        make_lock("job:expired-2", expires_in=-100)

        assert purge("--dry-run") == "Would delete 2 lock(s)\n"
        assert purge("--dry-run", "--older-than", "60") == "Would delete 1 lock(s)\n"
        assert purge("--dry-run", "--prefix", "job:expired-1") == "Would delete 1 lock(s)\n"
        assert len(remaining()) == 3

    def test_older_than_keeps_recently_expired_locks(self) -> None:
        make_lock("job:active")
        make_lock("job:expired-10s-ago", expires_in=-10)
        make_lock("job:expired-10min-ago", expires_in=-600)

        assert purge("--older-than", "60") == "Deleted 1 lock(s)\n"
        assert remaining() == ["job:active", "job:expired-10s-ago"]
        assert purge("--older-than", "5.5") == "Deleted 1 lock(s)\n"
        assert remaining() == ["job:active"]

    def test_prefix_limits_to_resources_starting_with_it(self) -> None:
        make_lock("report:a", expires_in=-1)
        make_lock("report:b", expires_in=-1)
        make_lock("job:report:c", expires_in=-1)

        assert purge("--prefix", "report:") == "Deleted 2 lock(s)\n"
        assert remaining() == ["job:report:c"]

    def test_batches_with_progress_at_verbosity_2(self) -> None:
        for n in range(5):
            make_lock(f"job:{n}", expires_in=-1)

        out = purge("--batch-size", "2", "--verbosity", "2")

        lines = out.splitlines()
        assert [line.split(" (")[0] for line in lines[:-1]] == [
            "Batch 1: deleted 2 lock(s), 2 so far",
            "Batch 2: deleted 2 lock(s), 4 so far",
            "Batch 3: deleted 1 lock(s), 5 so far",
        ]
        assert lines[-1] == "Deleted 5 lock(s)"
        assert remaining() == []

    def test_verbosity_0_prints_nothing(self) -> None:
        make_lock("job:expired", expires_in=-1)

        assert purge("--verbosity", "0") == ""
        assert remaining() == []

    def test_logs_to_django_dlock_purge_locks(self, caplog: pytest.LogCaptureFixture) -> None:
        make_lock("job:expired", expires_in=-1)

        with caplog.at_level(logging.INFO, logger="django_dlock.purge_locks"):
            purge()

        assert [(r.name, r.getMessage()) for r in caplog.records] == [
            ("django_dlock.purge_locks", "Deleted 1 lock(s)")
        ]

    def test_never_breaks_fencing(self) -> None:
        released = make_lock("job:42")
        DistributedLock.objects.release("job:42", owner="worker-1")
        expired = make_lock("job:43", expires_in=-1)

        assert purge() == "Deleted 2 lock(s)\n"

        assert FencingFloor.objects.get().value >= max(
            released.fencing_token, expired.fencing_token
        )
        again = DistributedLock.objects.acquire("job:42", owner="worker-2")
        assert again is not None
        assert again.fencing_token > released.fencing_token
        again = DistributedLock.objects.acquire("job:43", owner="worker-2")
        assert again is not None
        assert again.fencing_token > expired.fencing_token

    def test_inside_a_transaction_is_an_error(self) -> None:
        make_lock("job:expired", expires_in=-1)

        with pytest.raises(CommandError, match="inside a transaction"), transaction.atomic():
            purge()
        assert remaining() == ["job:expired"]


# -- bad arguments: a sentence, a non-zero exit, nothing deleted ------------------------

BAD_ARGUMENTS = [
    (
        ["--older-than", "-1"],
        "argument --older-than: must be a number of seconds from 0 to 1000000000, not '-1'",
    ),
    (
        ["--older-than", "soon"],
        "argument --older-than: must be a number of seconds from 0 to 1000000000, not 'soon'",
    ),
    (
        ["--older-than", "nan"],
        "argument --older-than: must be a number of seconds from 0 to 1000000000, not 'nan'",
    ),
    (
        ["--older-than", "1e20"],
        "argument --older-than: must be a number of seconds from 0 to 1000000000, not '1e20'",
    ),
    (["--batch-size", "0"], "argument --batch-size: must be a whole number, 1 or more, not '0'"),
    (
        ["--batch-size", "2.5"],
        "argument --batch-size: must be a whole number, 1 or more, not '2.5'",
    ),
    (["--prefix", "a b"], "argument --prefix: A prefix may not contain whitespace"),
    (["--prefix", ""], "argument --prefix: A prefix must be 1 to 255 characters long"),
    (["--no-such-option"], "unrecognized arguments: --no-such-option"),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("args", "message"), BAD_ARGUMENTS)
def test_bad_arguments_through_call_command(args: list[str], message: str) -> None:
    make_lock("job:expired", expires_in=-1)

    with pytest.raises(CommandError) as error:
        purge(*args)

    assert message in str(error.value)
    assert remaining() == ["job:expired"]


@pytest.mark.django_db
@pytest.mark.parametrize(("args", "message"), BAD_ARGUMENTS)
def test_bad_arguments_on_the_command_line(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    make_lock("job:expired", expires_in=-1)

    with pytest.raises(SystemExit) as exit_:
        execute_from_command_line(["manage.py", "purge_locks", *args])

    assert exit_.value.code == 2
    captured = capsys.readouterr()
    assert message in captured.err
    assert captured.out == ""
    assert remaining() == ["job:expired"]


@pytest.mark.django_db(transaction=True)  # the command closes the connections when it ends
def test_good_arguments_on_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    make_lock("job:expired", expires_in=-100)

    execute_from_command_line(
        ["manage.py", "purge_locks", "--older-than", "60", "--batch-size", "10", "--prefix", "job:"]
    )

    assert capsys.readouterr().out == "Deleted 1 lock(s)\n"
    assert remaining() == []


# -- real processes -----------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_never_deletes_a_lock_that_is_valid_when_deleted() -> None:
    """Two processes keep renewing, releasing and re-acquiring short-lived locks
    while a third purges over and over: every renew and acquire succeeds, and
    fencing tokens keep growing across purges."""
    expired = make_lock("filler:0", expires_in=-1)
    DistributedLock.objects.bulk_create(
        DistributedLock(
            resource=f"filler:{n}",
            owner="gone",
            acquired_at=expired.acquired_at,
            expires_at=expired.expires_at,
            fencing_token=1,
        )
        for n in range(1, 60)
    )
    start = spawn.Barrier(3)
    purged = spawn.Event()
    done = [spawn.Event(), spawn.Event()]
    db = database_settings()

    first, second, purger = run_in_processes(
        workers_purge.dispatch,
        [
            ("hold", db, "a", 30, start, purged, done[0]),
            ("hold", db, "b", 30, start, purged, done[1]),
            ("purge", db, start, 10, purged, done),
        ],
    )

    for holder in (first, second):
        assert holder["rounds"] >= 30
        assert holder["renewed"] == 4 * holder["rounds"]  # every renew succeeded
        assert holder["reacquired"] == holder["rounds"]
    assert purger["runs"] >= 10
    assert purger["deleted"] > 60  # the filler, plus released and flash locks
    assert not DistributedLock.objects.filter(resource__startswith="filler:").exists()
    held = DistributedLock.objects.filter(resource__contains=":held-")
    assert held.count() == 8
    assert held.active().count() == 8
