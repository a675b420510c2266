"""One contended resource, as each contender takes it: ``HotLock`` factories for
``benchmarks.clients.contention`` and ``wakeup``."""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

from benchmarks.clients import HotLock
from benchmarks.contenders import FLOOR_TABLE, _floor_sql, psycopg_connect

HOT = "hot"


class DlockHot:
    """django-dlock: ``acquire()`` to try once, ``lock(timeout=...)`` to wait."""

    def __init__(self, using: str, owner: str) -> None:
        from django_dlock.models import DistributedLock

        self.using, self.owner = using, owner
        self.locks = DistributedLock.objects.db_manager(using)
        self.held: Any = None
        self.kind: dict[str, Any] = {}  # lock()'s kind arguments (``shared``, ``limit``)

    def try_acquire(self) -> bool:
        return self.locks.acquire(HOT, owner=self.owner, ttl=30) is not None

    def acquire(self, timeout: float) -> bool:
        from django_dlock import LockNotAcquired, lock

        held = lock(HOT, owner=self.owner, ttl=30, timeout=timeout, using=self.using, **self.kind)
        try:
            held.__enter__()
        except LockNotAcquired:
            return False
        self.held = held
        return True

    def release(self) -> None:
        if self.held is not None:
            held, self.held = self.held, None
            held.__exit__(None, None, None)
        else:
            self.locks.release(HOT, owner=self.owner)


class FloorHot:
    """The raw upsert: tries only."""

    def __init__(self, settings: dict[str, Any], owner: str) -> None:
        self.raw = psycopg_connect(settings)
        self.owner = owner
        self.acquire_sql, self.release_sql = _floor_sql("now()", "now() + interval '30 seconds'")

    def try_acquire(self) -> bool:
        return self.raw.execute(self.acquire_sql, (HOT, self.owner)).fetchone() is not None

    def acquire(self, timeout: float) -> bool:
        raise NotImplementedError("the floor does not wait")

    def release(self) -> None:
        self.raw.execute(self.release_sql, (HOT, self.owner))


class AdvisoryHot:
    def __init__(self, settings: dict[str, Any], owner: str) -> None:
        self.raw = psycopg_connect(settings)
        self.key = zlib.crc32(HOT.encode())

    def try_acquire(self) -> bool:
        return bool(self.raw.execute("SELECT pg_try_advisory_lock(%s)", (self.key,)).fetchone()[0])

    def acquire(self, timeout: float) -> bool:
        self.raw.execute(f"SET lock_timeout = {int(timeout * 1000)}")
        try:
            self.raw.execute("SELECT pg_advisory_lock(%s)", (self.key,))
        except Exception as error:  # psycopg.errors.LockNotAvailable
            if type(error).__name__ == "LockNotAvailable":
                return False
            raise
        return True

    def release(self) -> None:
        self.raw.execute("SELECT pg_advisory_unlock(%s)", (self.key,))


class DbMutexHot:
    def __init__(self, owner: str) -> None:
        self.mutex: Any = None

    def try_acquire(self) -> bool:
        from db_mutex.db_mutex import db_mutex
        from db_mutex.exceptions import DBMutexError

        mutex = db_mutex(HOT)
        try:
            mutex.start()
        except DBMutexError:
            return False
        self.mutex = mutex
        return True

    def acquire(self, timeout: float) -> bool:
        raise NotImplementedError("django-db-mutex does not wait")

    def release(self) -> None:
        self.mutex.stop()


class RedisPyHot:
    def __init__(self, port: int, owner: str) -> None:
        import redis

        self.lock = redis.Redis(host="127.0.0.1", port=port).lock(HOT, timeout=30)

    def try_acquire(self) -> bool:
        return bool(self.lock.acquire(blocking=False))

    def acquire(self, timeout: float) -> bool:
        return bool(self.lock.acquire(blocking=True, blocking_timeout=timeout))

    def release(self) -> None:
        self.lock.release()


class PythonRedisLockHot:
    def __init__(self, port: int, owner: str) -> None:
        import redis
        import redis_lock

        self.lock = redis_lock.Lock(redis.Redis(host="127.0.0.1", port=port), HOT, expire=30)

    def try_acquire(self) -> bool:
        return bool(self.lock.acquire(blocking=False))

    def acquire(self, timeout: float) -> bool:
        return bool(self.lock.acquire(timeout=timeout))

    def release(self) -> None:
        self.lock.release()


class GetLockHot:
    """MariaDB's own named lock (``GET_LOCK``), the peer of django-dlock on
    MariaDB: granted inside the server, held by the session, no ttl, no token."""

    def __init__(self, using: str, owner: str) -> None:
        from django.db import connections

        self.connection = connections[using]
        self.name = f"bench-{HOT}"

    def _get(self, timeout: float) -> bool:
        with self.connection.cursor() as cursor:
            cursor.execute("SELECT GET_LOCK(%s, %s)", [self.name, timeout])
            return bool(cursor.fetchone()[0] == 1)

    def try_acquire(self) -> bool:
        return self._get(0)

    def acquire(self, timeout: float) -> bool:
        return self._get(timeout)

    def release(self) -> None:
        with self.connection.cursor() as cursor:
            cursor.execute("DO RELEASE_LOCK(%s)", [self.name])


def mariadb_hot_locks(using: str) -> dict[str, tuple[Callable[[str], HotLock], bool]]:
    """{name: (factory, can wait)} on the MariaDB alias ``using``."""
    return {
        "django-dlock, MariaDB": (lambda o: DlockHot(using, o), True),
        "GET_LOCK, MariaDB": (lambda o: GetLockHot(using, o), True),
    }


def hot_locks(
    postgres: dict[str, Any], redis_port: int
) -> dict[str, tuple[Callable[[str], HotLock], bool]]:
    """{name: (factory, can wait)}; MariaDB's where the benchmark has its alias
    (``setup.MARIADB_URL_ENV``)."""
    from django.db import connections

    mariadb = mariadb_hot_locks("mariadb") if "mariadb" in connections else {}
    return {
        **mariadb,
        "django-dlock, PostgreSQL": (lambda o: DlockHot("default", o), True),
        "django-dlock, SQLite": (lambda o: DlockHot("sqlite", o), True),
        "raw upsert floor, PostgreSQL": (lambda o: FloorHot(postgres, o), False),
        "advisory locks, PostgreSQL": (lambda o: AdvisoryHot(postgres, o), True),
        "django-db-mutex": (lambda o: DbMutexHot(o), False),
        "redis-py Lock": (lambda o: RedisPyHot(redis_port, o), True),
        "python-redis-lock": (lambda o: PythonRedisLockHot(redis_port, o), True),
    }


__all__ = ["FLOOR_TABLE", "hot_locks", "mariadb_hot_locks"]
