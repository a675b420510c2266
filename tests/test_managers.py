"""The manager's Python API: acquire, renew, release, expiry, fencing."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db import connection, models, transaction
from django.test.utils import CaptureQueriesContext

from django_dlock import signals
from django_dlock.backends import backend_for
from django_dlock.exceptions import LockTransactionError
from django_dlock.models import DistributedLock, FencingFloor, ReleaseResult
from tests.utils import expire

pytestmark = pytest.mark.django_db(transaction=True)

Locks = DistributedLock.objects


class TestAcquire:
    def test_fresh_acquire_returns_the_lock(self) -> None:
        lock = Locks.acquire("job:42", owner="worker-1", ttl=30)

        assert lock is not None
        assert (lock.resource, lock.owner) == ("job:42", "worker-1")
        assert lock.fencing_token >= 1
        assert timedelta(seconds=29) < lock.expires_at - lock.acquired_at <= timedelta(seconds=30)
        stored = DistributedLock.objects.get(resource="job:42")
        assert (stored.pk, stored.owner, stored.fencing_token) == (
            lock.pk,
            "worker-1",
            lock.fencing_token,
        )
        assert stored.expires_at == lock.expires_at

    def test_held_by_another_owner_returns_none_and_changes_nothing(self) -> None:
        first = Locks.acquire("job:42", owner="worker-1", ttl=30)
        assert first is not None

        assert Locks.acquire("job:42", owner="worker-2", ttl=30) is None

        stored = DistributedLock.objects.get(resource="job:42")
        assert (stored.owner, stored.expires_at, stored.fencing_token) == (
            "worker-1",
            first.expires_at,
            first.fencing_token,
        )

    def test_same_owner_reacquires_with_new_expiry_and_same_token(self) -> None:
        first = Locks.acquire("job:42", owner="worker-1", ttl=5)
        assert first is not None

        again = Locks.acquire("job:42", owner="worker-1", ttl=60)

        assert again is not None
        assert again.pk == first.pk
        assert again.fencing_token == first.fencing_token
        assert again.acquired_at == first.acquired_at
        assert again.expires_at > first.expires_at

    def test_owner_is_generated_when_omitted(self) -> None:
        a = Locks.acquire("job:a")
        b = Locks.acquire("job:b")

        assert a is not None and b is not None
        assert len(a.owner) == 32 and int(a.owner, 16) >= 0  # 128 random bits, hex
        assert a.owner != b.owner

    def test_default_ttl_comes_from_settings(self, settings: object) -> None:
        settings.DLOCK_DEFAULT_TTL = 7  # type: ignore[attr-defined]

        lock = Locks.acquire("job:42", owner="w")

        assert lock is not None
        assert lock.expires_at - lock.acquired_at == timedelta(seconds=7)

    def test_expired_lock_is_taken_over_by_update_keeping_the_id(self) -> None:
        first = Locks.acquire("job:42", owner="worker-1", ttl=30)
        assert first is not None
        expire("job:42")

        second = Locks.acquire("job:42", owner="worker-2", ttl=30)

        assert second is not None
        assert second.pk == first.pk
        assert second.owner == "worker-2"
        assert second.fencing_token > first.fencing_token
        assert second.acquired_at > first.acquired_at
        assert DistributedLock.objects.count() == 1

    def test_a_lock_expires_by_itself(self) -> None:
        assert Locks.acquire("job:42", owner="worker-1", ttl=0.2) is not None
        assert Locks.acquire("job:42", owner="worker-2", ttl=30) is None

        deadline = time.monotonic() + 5
        while (taken := Locks.acquire("job:42", owner="worker-2", ttl=30)) is None:
            assert time.monotonic() < deadline, "the 0.2 s lock never expired"
            time.sleep(0.02)

        assert taken.owner == "worker-2"

    def test_owner_whose_lock_expired_gets_a_new_token(self) -> None:
        first = Locks.acquire("job:42", owner="worker-1", ttl=30)
        assert first is not None
        expire("job:42")

        again = Locks.acquire("job:42", owner="worker-1", ttl=30)

        assert again is not None
        assert again.fencing_token > first.fencing_token

    def test_takeover_and_acquire_send_signals(self) -> None:
        seen: list[tuple[str, dict[str, object]]] = []

        def record(signal_name: str):
            def receiver(sender: object, **kwargs: object) -> None:
                seen.append((signal_name, kwargs))

            return receiver

        receivers = {
            "acquired": record("acquired"),
            "taken_over": record("taken_over"),
            "released": record("released"),
            "renewed": record("renewed"),
        }
        signals.lock_acquired.connect(receivers["acquired"])
        signals.lock_taken_over.connect(receivers["taken_over"])
        signals.lock_released.connect(receivers["released"])
        signals.lock_renewed.connect(receivers["renewed"])
        try:
            Locks.acquire("job:42", owner="worker-1", ttl=30)
            expire("job:42")
            Locks.acquire("job:42", owner="worker-2", ttl=30)
            Locks.renew("job:42", owner="worker-2", ttl=30)
            Locks.release("job:42", owner="worker-2")
        finally:
            signals.lock_acquired.disconnect(receivers["acquired"])
            signals.lock_taken_over.disconnect(receivers["taken_over"])
            signals.lock_released.disconnect(receivers["released"])
            signals.lock_renewed.disconnect(receivers["renewed"])

        assert [name for name, _ in seen] == [
            "acquired",
            "taken_over",
            "acquired",
            "renewed",
            "released",
        ]
        assert seen[1][1]["previous_owner"] == "worker-1"
        assert seen[4][1]["owner"] == "worker-2"
        assert seen[4][1]["forced"] is False

    @pytest.mark.parametrize("situation", ["new row", "released row", "re-acquire"])
    def test_signals_are_sent_after_the_commit(self, situation: str) -> None:
        if situation != "new row":
            Locks.acquire("job:42", owner="worker-1", ttl=30)
        if situation == "released row":
            Locks.release("job:42", owner="worker-1")
        seen: list[bool] = []

        def receiver(sender: object, **kwargs: object) -> None:
            seen.append(connection.in_atomic_block)
            raise RuntimeError("a receiver failed")

        signals.lock_acquired.connect(receiver)
        signals.lock_renewed.connect(receiver)
        try:
            with pytest.raises(RuntimeError, match="a receiver failed"):
                Locks.acquire("job:42", owner="worker-1", ttl=30)
        finally:
            signals.lock_acquired.disconnect(receiver)
            signals.lock_renewed.disconnect(receiver)

        assert seen == [False]
        assert DistributedLock.objects.active().filter(resource="job:42", owner="worker-1").exists()


class TestRenew:
    def test_renew_extends_a_valid_lock(self) -> None:
        first = Locks.acquire("job:42", owner="worker-1", ttl=5)
        assert first is not None

        renewed = Locks.renew("job:42", owner="worker-1", ttl=60)

        assert renewed is not None
        assert renewed.expires_at > first.expires_at
        assert renewed.acquired_at == first.acquired_at  # renew does not change it
        assert renewed.fencing_token == first.fencing_token
        assert DistributedLock.objects.get(resource="job:42").expires_at == renewed.expires_at

    def test_renew_of_another_owners_lock_returns_none(self) -> None:
        first = Locks.acquire("job:42", owner="worker-1", ttl=30)
        assert first is not None

        assert Locks.renew("job:42", owner="worker-2", ttl=60) is None

        assert DistributedLock.objects.get(resource="job:42").expires_at == first.expires_at

    def test_renew_of_an_expired_lock_returns_none(self) -> None:
        Locks.acquire("job:42", owner="worker-1", ttl=30)
        expire("job:42")
        expired_at = DistributedLock.objects.get(resource="job:42").expires_at

        assert Locks.renew("job:42", owner="worker-1", ttl=60) is None

        assert DistributedLock.objects.get(resource="job:42").expires_at == expired_at

    def test_renew_of_a_missing_lock_is_told_apart(self) -> None:
        with pytest.raises(DistributedLock.DoesNotExist):
            Locks.renew("job:never", owner="worker-1")

    def test_renew_of_a_released_lock_is_a_missing_lock(self) -> None:
        Locks.acquire("job:42", owner="worker-1", ttl=30)
        Locks.release("job:42", owner="worker-1")

        with pytest.raises(DistributedLock.DoesNotExist):
            Locks.renew("job:42", owner="worker-1")


class TestRelease:
    def test_release_by_the_owner(self) -> None:
        Locks.acquire("job:42", owner="worker-1", ttl=30)

        assert Locks.release("job:42", owner="worker-1") is ReleaseResult.RELEASED

        assert not DistributedLock.objects.active().filter(resource="job:42").exists()
        assert Locks.acquire("job:42", owner="worker-2", ttl=30) is not None

    def test_release_by_another_owner_is_forbidden_and_keeps_the_lock(self) -> None:
        lock = Locks.acquire("job:42", owner="worker-1", ttl=30)
        assert lock is not None

        assert Locks.release("job:42", owner="worker-2") is ReleaseResult.FORBIDDEN

        stored = DistributedLock.objects.active().get(resource="job:42")
        assert (stored.owner, stored.expires_at) == ("worker-1", lock.expires_at)

    def test_release_of_a_missing_lock(self) -> None:
        assert Locks.release("job:never", owner="worker-1") is ReleaseResult.NOT_FOUND

    def test_release_twice(self) -> None:
        Locks.acquire("job:42", owner="worker-1", ttl=30)
        Locks.release("job:42", owner="worker-1")

        assert Locks.release("job:42", owner="worker-1") is ReleaseResult.NOT_FOUND

    def test_release_of_an_expired_lock_is_not_found(self) -> None:
        Locks.acquire("job:42", owner="worker-1", ttl=30)
        expire("job:42")

        assert Locks.release("job:42", owner="worker-1") is ReleaseResult.NOT_FOUND
        assert Locks.release("job:42", owner="worker-2") is ReleaseResult.NOT_FOUND

    def test_force_release(self) -> None:
        Locks.acquire("job:42", owner="worker-1", ttl=30)

        assert Locks.force_release("job:42") is True
        assert Locks.force_release("job:42") is False
        assert Locks.acquire("job:42", owner="worker-2", ttl=30) is not None

    def test_a_release_builds_no_lock_instance_for_nobody(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # It returns none; lock_released carries one only to a receiver.
        built: list[object] = []
        from_db = DistributedLock.from_db.__func__  # type: ignore[attr-defined]

        def counting(cls: type[DistributedLock], *args: object) -> DistributedLock:
            built.append(args)
            return from_db(cls, *args)  # type: ignore[no-any-return]

        monkeypatch.setattr(DistributedLock, "from_db", classmethod(counting))
        for release in (
            lambda: Locks.release("job:1", owner="w"),
            lambda: Locks.force_release("job:1"),
            lambda: Locks.release_all(["job:1"], owner="w"),
        ):
            assert Locks.acquire("job:1", owner="w", ttl=30) is not None
            built.clear()
            assert release()
            assert built == []
        seen: list[object] = []

        def receiver(sender: object, lock: DistributedLock, **kwargs: object) -> None:
            seen.append((lock.resource, lock.owner, kwargs["owner"]))

        signals.lock_released.connect(receiver)
        try:
            Locks.acquire("job:1", owner="w", ttl=30)
            Locks.release("job:1", owner="w")
        finally:
            signals.lock_released.disconnect(receiver)
        assert seen == [("job:1", "", "w")]


class TestExpiredCountsAsAbsent:
    def test_querysets_use_the_database_clock(self) -> None:
        Locks.acquire("job:live", owner="w", ttl=30)
        Locks.acquire("job:dead", owner="w", ttl=30)
        Locks.acquire("job:gone", owner="w", ttl=30)
        expire("job:dead")
        Locks.release("job:gone", owner="w")

        assert list(DistributedLock.objects.active().values_list("resource", flat=True)) == [
            "job:live"
        ]
        assert sorted(DistributedLock.objects.expired().values_list("resource", flat=True)) == [
            "job:dead",
            "job:gone",
        ]

    def test_a_released_lock_is_expired_at_once(self) -> None:
        # On SQLite the database clock has millisecond text; a lock released in this
        # millisecond must not look valid for the rest of it (DatabaseNow pads it).
        for n in range(20):
            Locks.acquire(f"job:{n}", owner="w", ttl=30)
            Locks.release(f"job:{n}", owner="w")
            assert not DistributedLock.objects.active().filter(resource=f"job:{n}").exists()


class TestFencing:
    def test_tokens_increase_across_release_expiry_takeover_and_purge(self) -> None:
        tokens = []
        lock = Locks.acquire("job:42", owner="a", ttl=30)
        tokens.append(lock.fencing_token)  # type: ignore[union-attr]
        Locks.release("job:42", owner="a")
        tokens.append(Locks.acquire("job:42", owner="b", ttl=30).fencing_token)  # type: ignore[union-attr]
        expire("job:42")
        tokens.append(Locks.acquire("job:42", owner="c", ttl=30).fencing_token)  # type: ignore[union-attr]
        Locks.release("job:42", owner="c")
        assert Locks.purge_expired() == 1
        assert not DistributedLock.objects.filter(resource="job:42").exists()
        tokens.append(Locks.acquire("job:42", owner="d", ttl=30).fencing_token)  # type: ignore[union-attr]

        assert tokens == sorted(set(tokens)), tokens

    def test_purge_records_the_largest_purged_token(self) -> None:
        for n in range(5):
            Locks.acquire("job:busy", owner=f"w{n}", ttl=30)
            Locks.release("job:busy", owner=f"w{n}")
        busy_token = DistributedLock.objects.get(resource="job:busy").fencing_token
        Locks.acquire("job:other", owner="w", ttl=30)

        Locks.purge_expired()

        assert FencingFloor.objects.get().value == busy_token
        assert Locks.acquire("job:busy", owner="w", ttl=30).fencing_token > busy_token  # type: ignore[union-attr]
        assert DistributedLock.objects.filter(resource="job:other").exists()  # valid: kept

    def test_purge_keeps_valid_and_recently_expired_locks(self) -> None:
        Locks.acquire("job:valid", owner="w", ttl=30)
        Locks.acquire("job:old", owner="w", ttl=30)
        expire("job:old", seconds_ago=3600)
        Locks.acquire("job:recent", owner="w", ttl=30)
        Locks.release("job:recent", owner="w")  # just now

        assert Locks.purge_expired(older_than=600) == 1

        assert sorted(DistributedLock.objects.values_list("resource", flat=True)) == [
            "job:recent",
            "job:valid",
        ]

    def test_purge_in_batches_and_by_prefix(self) -> None:
        for n in range(7):
            Locks.acquire(f"a:{n}", owner="w", ttl=30)
            Locks.release(f"a:{n}", owner="w")
        Locks.acquire("b:1", owner="w", ttl=30)
        Locks.release("b:1", owner="w")

        batches: list[int] = []
        assert Locks.purge_expired(batch_size=3, prefix="a:", on_batch=batches.append) == 7
        assert batches == [3, 3, 1]
        assert Locks.purge_expired(batch_size=3, prefix="a:", on_batch=batches.append) == 0
        assert batches == [3, 3, 1]
        assert list(DistributedLock.objects.values_list("resource", flat=True)) == ["b:1"]

    def test_purge_ends_while_an_operation_holds_an_expired_lock(self) -> None:
        """A lock that an operation holds locked is skipped, and the purge
        deletes the others and returns: it used to choose that lock again and
        again until the operation let go."""
        if connection.vendor == "sqlite":
            pytest.skip("SQLite locks the whole database, not rows: the purge waits for the writer")
        for n in range(5):
            Locks.acquire(f"held:{n}", owner="w", ttl=30)
            Locks.release(f"held:{n}", owner="w")
        holding, let_go = threading.Event(), threading.Event()

        def hold_a_row() -> None:
            try:
                with transaction.atomic():
                    DistributedLock.objects.select_for_update().get(resource="held:2")
                    holding.set()
                    let_go.wait(30)
            finally:
                connection.close()

        def purge() -> None:
            try:
                purged.append(Locks.purge_expired(batch_size=2))
            finally:
                connection.close()

        holder = threading.Thread(target=hold_a_row)
        holder.start()
        purged: list[int] = []
        try:
            assert holding.wait(10)
            purger = threading.Thread(target=purge, daemon=True)
            purger.start()
            purger.join(10)
            assert not purger.is_alive(), "the purge did not end while a lock was held"
        finally:
            let_go.set()
            holder.join()
        assert purged == [4]
        assert list(DistributedLock.objects.values_list("resource", flat=True)) == ["held:2"]


class TestStatements:
    """Each operation is BEGIN, SELECT ... FOR UPDATE, at most one write, COMMIT
    (on PostgreSQL, one statement that locks the row FOR UPDATE and writes it)."""

    def count(self, operation):
        with CaptureQueriesContext(connection) as queries:
            operation()
        return [q["sql"].split()[0].upper() for q in queries.captured_queries]

    def test_first_acquire_takeover_renew_release(self, vendor: str) -> None:
        with CaptureQueriesContext(connection) as queries:
            Locks.acquire("job:42", owner="a", ttl=30)
        if vendor == "postgresql" and backend_for("default").features.one_statement:
            # One statement: its first CTE locks the row FOR UPDATE, the writes join it.
            (statement,) = [q["sql"] for q in queries.captured_queries if "FOR UPDATE" in q["sql"]]
            assert "WITH locked AS (SELECT" in statement
            assert "INSERT INTO" in statement and "UPDATE" in statement.split("FOR UPDATE", 1)[1]

        # MySQL has no INSERT ... RETURNING that tells an insert from a lost race:
        # a first acquisition there reads its new row back, after the UPDATE
        # that found no row, and takes the hold's gate first (mysql.wake).
        first_acquire = 7 if vendor == "mysql" else 4
        assert len(self.count(lambda: Locks.acquire("job:new", owner="a", ttl=30))) <= first_acquire
        # MySQL: the exclusive lock's acquire and release are an UPDATE in
        # autocommit and a SELECT of what it decided.
        one_row = ["UPDATE", "SELECT"]
        if vendor == "mysql":
            assert self.count(lambda: Locks.acquire("job:42", owner="a", ttl=30)) == one_row
            assert self.count(lambda: Locks.release("job:42", owner="a")) == one_row
            assert self.count(lambda: Locks.acquire("job:42", owner="b", ttl=30)) == one_row
        assert len(self.count(lambda: Locks.acquire("job:42", owner="b", ttl=30))) <= 4
        assert len(self.count(lambda: Locks.renew("job:42", owner="b", ttl=30))) <= 4
        assert len(self.count(lambda: Locks.release("job:42", owner="b"))) <= 4
        assert len(self.count(lambda: Locks.acquire("job:42", owner="c", ttl=30))) <= 4
        assert len(self.count(lambda: Locks.release("job:42", owner="c"))) <= 4


class TestTransactions:
    def test_refuses_to_join_the_callers_transaction(self) -> None:
        with transaction.atomic(), pytest.raises(LockTransactionError, match="DLOCK_DATABASE"):
            Locks.acquire("job:42", owner="a", ttl=30)
        with transaction.atomic(), pytest.raises(LockTransactionError):
            Locks.renew("job:42", owner="a", ttl=30)
        with transaction.atomic(), pytest.raises(LockTransactionError):
            Locks.release("job:42", owner="a")

        assert not DistributedLock.objects.exists()

    def test_refuses_to_join_a_transaction_opened_by_turning_autocommit_off(self) -> None:
        transaction.set_autocommit(False)
        try:
            with pytest.raises(LockTransactionError):
                Locks.acquire("job:42", owner="a", ttl=30)
        finally:
            transaction.rollback()
            transaction.set_autocommit(True)
        assert not DistributedLock.objects.exists()

    @pytest.mark.requires_postgres  # SQLite has one writer: the caller's transaction holds it
    @pytest.mark.django_db(transaction=True, databases=["default", "locks"])
    def test_a_lock_survives_the_callers_rollback_on_its_own_alias(self, settings: object) -> None:
        # "locks" is a second connection to the same database (tests/settings.py).
        settings.DLOCK_DATABASE = "locks"  # type: ignore[attr-defined]

        class Rollback(Exception):
            pass

        with pytest.raises(Rollback), transaction.atomic():
            assert Locks.acquire("job:42", owner="a", ttl=30) is not None
            raise Rollback

        assert DistributedLock.objects.active().filter(resource="job:42").exists()


class TestValidation:
    @pytest.mark.parametrize(
        "resource",
        ["", "x" * 256, "job 42", "job\t42", "job/42", "job\x0042", "job\n", "job\ud800", 42, None],
    )
    def test_bad_resource(self, resource: object) -> None:
        with pytest.raises(ValidationError):
            Locks.acquire(resource, owner="a", ttl=30)  # type: ignore[call-overload]
        assert not DistributedLock.objects.exists()

    @pytest.mark.parametrize("owner", ["", "x" * 256, "a\x00b", "\udc80", 7])
    def test_bad_owner(self, owner: object) -> None:
        with pytest.raises(ValidationError):
            Locks.acquire("job:42", owner=owner, ttl=30)  # type: ignore[call-overload]
        with pytest.raises(ValidationError):
            Locks.release("job:42", owner=owner)  # type: ignore[arg-type]

    @pytest.mark.parametrize("ttl", [0, -1, 86401, 10**400, float("nan"), float("inf"), True, "30"])
    def test_bad_ttl(self, ttl: object) -> None:
        with pytest.raises(ValidationError):
            Locks.acquire("job:42", owner="a", ttl=ttl)  # type: ignore[call-overload]
        assert not DistributedLock.objects.exists()

    def test_a_tiny_ttl_lives_at_least_a_millisecond(self) -> None:
        lock = Locks.acquire("job:42", owner="a", ttl=1e-7)

        assert lock is not None
        assert lock.expires_at - lock.acquired_at == timedelta(milliseconds=1)

    def test_good_names(self) -> None:
        for resource in ("billing.nightly", "report:monthly-2026-05", "x" * 255, "ünïcødé"):
            assert Locks.acquire(resource, owner="o" * 255, ttl=0.5) is not None


# The manager's own public calls: those CONTRACT.md, docs/usage.md and the
# CHANGELOG name. The internal operations (``django_dlock.service``) stay off it.
MANAGER_CALLS = {
    "acquire",
    "renew",
    "release",
    "force_release",
    "holders",
    "acquire_all",
    "release_all",
    "purge_expired",
    "expires_in",
    "available_in",
    "aacquire",
    "arenew",
    "arelease",
    # the queryset's filters
    "active",
    "expired",
    "owned_by",
    "with_resource_prefix",
    "delayed",
    "purgeable",
}


def public_calls(manager: object) -> set[str]:
    """The public methods of ``manager`` (not its ``model`` class)."""
    values = {name: getattr(manager, name, None) for name in dir(manager)}
    return {
        name
        for name, value in values.items()
        if not name.startswith("_") and callable(value) and not isinstance(value, type)
    }


@pytest.mark.django_db(transaction=False)
def test_the_manager_offers_exactly_the_documented_calls_besides_djangos() -> None:
    ours = public_calls(Locks) - public_calls(models.Manager())
    assert ours == MANAGER_CALLS


def test_purgeable_is_what_the_purge_deletes() -> None:
    for name in ("pg:a", "pg:b", "pg:delayed"):
        DistributedLock.objects.acquire(
            name, "a", ttl=60, lock_delay=600 if "delayed" in name else None
        )
        DistributedLock.objects.force_release(name)
    DistributedLock.objects.acquire("pg:held", "a", ttl=60)
    purgeable = sorted(DistributedLock.objects.purgeable().values_list("resource", flat=True))

    assert purgeable == ["pg:a", "pg:b"]  # not the held one, nor the one in its lock-delay
    assert DistributedLock.objects.purge_expired() == len(purgeable)


def test_available_in_counts_down_a_lock_delay_only() -> None:
    assert DistributedLock.objects.available_in("ai:job") is None  # never locked
    assert DistributedLock.objects.acquire("ai:job", "a", ttl=60, lock_delay=600)
    assert DistributedLock.objects.available_in("ai:job") is None  # held
    assert DistributedLock.objects.force_release("ai:job")
    left = DistributedLock.objects.available_in("ai:job")
    assert left is not None and 590 < left <= 600
    assert [lock.resource for lock in DistributedLock.objects.delayed()] == ["ai:job"]
