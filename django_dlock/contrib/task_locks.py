"""What Celery's and Django's task integrations share: the parameters a task body
asks for, the signature its queue checks, one run under the lock, the owner of a
redelivered task, the backoff of a retry, and how a skipped run is told apart.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import hmac
import inspect
import logging
import random
import reprlib
from collections.abc import Callable
from typing import Any, Literal

from django.conf import settings
from django.dispatch import Signal

from django_dlock.contrib.stop_on_loss import StopOnLoss
from django_dlock.exceptions import LockNotAcquired
from django_dlock.kinds import LockKind
from django_dlock.locking import LockHandle, lock
from django_dlock.locking.names import ResourceName
from django_dlock.models import DistributedLock

__all__ = [
    "FENCING_TOKEN_ARG",
    "HANDLE_ARG",
    "RETRY_WAIT",
    "SKIPPED",
    "LockKind",
    "LockedFunction",
    "backoff",
    "task_skipped",
]

logger = logging.getLogger("django_dlock.tasks")

OnLost = Literal["raise", "stop"]

#: The parameter a task names to be given the lock's fencing token.
FENCING_TOKEN_ARG = "fencing_token"  # noqa: S105 - a parameter name
#: The parameter a task names to be given the lock's handle (``LockHandle``).
HANDLE_ARG = "held"

#: What a skipped run returns (its state is a success): a string that no task
#: returns by accident, and that survives any result serializer.
SKIPPED = "django_dlock:skipped"

#: How long (seconds) a run whose policy retries or defers waits in the lock's
#: queue before it gives its worker back, when ``timeout`` is not given.
RETRY_WAIT = 5.0

# Sent when a run is skipped because another owner holds its lock.
# Keyword arguments: resource, task_name, task_id (None outside a worker),
# args, kwargs. Never an owner.
task_skipped = Signal()

_ARGUMENTS = reprlib.Repr()
_ARGUMENTS.maxstring = 80
_ARGUMENTS.maxother = 80


class LockedFunction:
    """A task function and how each of its calls runs under its lock.

    The body may name ``fencing_token`` and ``held`` parameters: they are
    filled here, and left out of ``signature``, the one its callers see.
    """

    def __init__(
        self,
        function: Callable[..., Any],
        key: str | Callable[..., str],
        *,
        ttl: float | None,
        auto_renew: bool,
        on_lost: OnLost,
        kind: LockKind | None = None,
        label: str = "",
    ) -> None:
        if on_lost not in ("raise", "stop"):
            raise ValueError(f"on_lost must be 'raise' or 'stop', not {on_lost!r}")
        self.function = function
        self.ttl = ttl
        self.auto_renew = auto_renew
        self.on_lost = on_lost
        self.kind = kind or LockKind.exclusive()
        self.label = label
        full = inspect.signature(function)
        injected = [name for name in (FENCING_TOKEN_ARG, HANDLE_ARG) if name in full.parameters]
        self.injected = frozenset(injected)
        #: What callers pass: the function's parameters less the injected ones.
        self.signature = full.replace(
            parameters=[p for p in full.parameters.values() if p.name not in self.injected]
        )
        self.name = ResourceName(key, _with_signature(function, self.signature), what="task lock")

    def resource(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        return self.name.format(args, kwargs)

    def hold(
        self, resource: str, owner: str | None, timeout: float | None, label: str = ""
    ) -> lock:
        """The ``lock()`` of one run (not yet entered); ``label`` where the
        decorator gave none."""
        return lock(
            resource,
            owner=owner,
            ttl=self.ttl,
            timeout=timeout,
            auto_renew=self.auto_renew,
            shared=self.kind.shared,
            limit=self.kind.limit,
            reentrant=self.kind.reentrant,
            label=self.label or label,
        )

    def run(self, held: LockHandle, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Call the body holding ``held``; with ``on_lost="stop"``, stopped on a loss."""
        stopping = StopOnLoss(held) if self.on_lost == "stop" else contextlib.nullcontext()
        with stopping:
            return self.function(*args, **self._injected(held, kwargs))

    async def arun(self, held: LockHandle, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``run()`` for an async body (``on_lost="stop"`` is for sync bodies only)."""
        return await self.function(*args, **self._injected(held, kwargs))

    def _injected(self, held: LockHandle, kwargs: dict[str, Any]) -> dict[str, Any]:
        if FENCING_TOKEN_ARG in self.injected:
            kwargs = {**kwargs, FENCING_TOKEN_ARG: held.fencing_token}
        if HANDLE_ARG in self.injected:
            kwargs = {**kwargs, HANDLE_ARG: held}
        return kwargs

    def wraps(self, wrapper: Callable[..., Any]) -> Callable[..., Any]:
        """``wrapper`` made to look like the function, with the callers' signature."""
        wrapped = functools.wraps(self.function)(wrapper)
        wrapped.__signature__ = self.signature  # type: ignore[attr-defined]
        return wrapped


def _with_signature(function: Callable[..., Any], signature: inspect.Signature) -> Any:
    """A stand-in for ``function`` whose signature is ``signature`` (for ``ResourceName``)."""

    @functools.wraps(function)
    def stand_in(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("never called")  # pragma: no cover

    stand_in.__signature__ = signature  # type: ignore[attr-defined]
    return stand_in


def owner_for_task(task_id: str, resource: str) -> str:
    """The owner of a task's lock: the same for every delivery of one task id, so
    that a redelivered task (its worker died) takes its own lock back; derived
    with the project's SECRET_KEY, so that knowing a task id is not knowing the
    owner (who knows the owner may release the lock)."""
    message = f"django_dlock.task:{task_id}:{resource}".encode()
    return hmac.new(settings.SECRET_KEY.encode(), message, hashlib.sha256).hexdigest()[:32]


def holds_own_lock(resource: str, owner: str) -> bool:
    """Whether ``owner`` validly holds ``resource`` now, of any kind (a
    redelivered run's earlier delivery took it)."""
    return any(hold.owner == owner for hold in DistributedLock.objects.holders(resource))


def backoff(attempt: int, base: float, refused: LockNotAcquired) -> float:
    """Seconds before retry ``attempt`` (0 for the first): exponential from ``base``
    with jitter (between half and all of ``base * 2**attempt``), capped at when
    the lock comes free as the refusal found it (``LockNotAcquired.free_in``: the
    holder's expiry, or a lock-delay's end), 0 when it found it free."""
    left = refused.free_in
    if left is None:
        return 0.0
    window = base * 2.0 ** min(attempt, 32)
    delay = window * random.uniform(0.5, 1.0)  # noqa: S311 - jitter, not a secret
    return round(min(delay, left + 0.1), 3)  # just past the expiry, never a whole ttl early


def announce_skip(
    resource: str,
    task_name: str,
    task_id: str | None,
    args: tuple[Any, ...] | list[Any],
    kwargs: dict[str, Any],
) -> str:
    """Log a skipped run (task, id, arguments: never the owner), send
    ``task_skipped``, and return ``SKIPPED``, the run's result."""
    logger.info(
        "Skipped task %s[%s] args=%s kwargs=%s: the lock on %r is held by another owner.",
        task_name,
        task_id,
        _ARGUMENTS.repr(tuple(args)),
        _ARGUMENTS.repr(kwargs),
        resource,
    )
    task_skipped.send(
        sender=LockedFunction,
        resource=resource,
        task_name=task_name,
        task_id=task_id,
        args=tuple(args),
        kwargs=dict(kwargs),
    )
    return SKIPPED
