"""The signal receivers of ``contrib.prometheus`` and ``contrib.opentelemetry``."""

from __future__ import annotations

from typing import Any

from django.dispatch import Signal

from django_dlock import signals

__all__ = ["LockSignalReceivers"]


class LockSignalReceivers:
    """``connect()`` and ``disconnect()`` this object's ``_acquired``,
    ``_refused``, ``_wait_ended``, ``_released`` and ``_lost`` to the signals of
    those names. The dispatch uids are this object's: connecting twice connects once."""

    def _receivers(self) -> list[tuple[Signal, Any]]:
        return [
            (signals.lock_acquired, self._acquired),
            (signals.lock_refused, self._refused),
            (signals.lock_wait_ended, self._wait_ended),
            (signals.lock_released, self._released),
            (signals.lock_lost, self._lost),
        ]

    def connect(self) -> None:
        for signal, receiver in self._receivers():
            signal.connect(receiver, weak=False, dispatch_uid=(id(self), receiver.__name__))

    def disconnect(self) -> None:
        for signal, receiver in self._receivers():
            signal.disconnect(dispatch_uid=(id(self), receiver.__name__))

    def _acquired(self, sender: Any, *, lock: Any, **kwargs: Any) -> None:
        raise NotImplementedError

    def _refused(self, sender: Any, *, resource: str, **kwargs: Any) -> None:
        raise NotImplementedError

    def _wait_ended(
        self, sender: Any, *, resource: str, waited: float, outcome: str, **kwargs: Any
    ) -> None:
        raise NotImplementedError

    def _released(self, sender: Any, *, lock: Any, forced: bool, **kwargs: Any) -> None:
        raise NotImplementedError

    def _lost(self, sender: Any, *, resource: str, reason: str, **kwargs: Any) -> None:
        raise NotImplementedError
