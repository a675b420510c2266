"""``PerAlias``: one object per database alias in this process, made on first use."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

_T = TypeVar("_T")


class PerAlias(Generic[_T]):
    """``instances(using)`` gives this process's one ``factory(using)``."""

    def __init__(self, factory: Callable[[str], _T]) -> None:
        self._factory = factory
        self._instances: dict[str, _T] = {}
        self._lock = threading.Lock()
        # A forked child has none of the parent's threads, and must not share
        # its connections, sockets or listening channel: it makes its own.
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        self._lock = threading.Lock()  # the parent may have held it while forking
        self._instances = {}

    def __call__(self, using: str) -> _T:
        with self._lock:
            instance = self._instances.get(using)
            if instance is None:
                instance = self._instances[using] = self._factory(using)
            return instance

    def pop_all(self) -> list[_T]:
        """Forget every instance (the next call makes a new one); return them."""
        with self._lock:
            instances = list(self._instances.values())
            self._instances.clear()
            return instances
