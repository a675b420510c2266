"""Django's tasks framework as ``contrib.tasks`` sees it: which module it is
(``django.tasks`` or the ``django-tasks`` backport), the result of the task
running now in this thread, and the marks of a deferred run."""

from __future__ import annotations

import contextvars
import importlib
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from django_dlock.contrib import import_extra

if TYPE_CHECKING:
    from django.tasks import TaskResult

#: The keyword argument a deferred run is enqueued with: its attempt number (the
#: first run is attempt 1). The body never sees it.
ATTEMPT_ARG = "dlock_attempt"

#: The ``"django_dlock"`` value of a deferred run's result (see ``deferred_to``).
DEFERRED = "deferred"


def task_framework() -> ModuleType:
    """``django.tasks``, or the ``django_tasks`` backport where Django has none (as
    django-tasks-db picks): ``task_framework().task`` is the ``@task`` decorator."""
    try:
        return importlib.import_module("django.tasks")
    except ImportError:
        return import_extra("django_tasks", __name__, "pip install django-tasks (or Django 6)")


# The result of the task that runs now in this thread, from the framework's
# task_started signal (which every backend sends just before it calls the task).
_running: contextvars.ContextVar[TaskResult[..., Any] | None] = contextvars.ContextVar(
    "django_dlock_running_task", default=None
)


def _started(sender: Any, task_result: TaskResult[..., Any], **kwargs: Any) -> None:
    _running.set(task_result)


def _finished(sender: Any, task_result: TaskResult[..., Any], **kwargs: Any) -> None:
    _running.set(None)


_signals = importlib.import_module(f"{task_framework().__name__}.signals")
_signals.task_started.connect(_started, dispatch_uid="django_dlock.contrib.tasks")
_signals.task_finished.connect(_finished, dispatch_uid="django_dlock.contrib.tasks")


def deferred_to(return_value: Any) -> str | None:
    """The id of the result a deferred run enqueued, or ``None`` if the run was not deferred."""
    if isinstance(return_value, dict) and return_value.get("django_dlock") == DEFERRED:
        return str(return_value["result_id"])
    return None


def running_result(run_locked: Callable[..., Any]) -> TaskResult[..., Any] | None:
    """The result of the task whose function is ``run_locked`` and that runs now;
    ``None`` for a direct call (also one made inside another task)."""
    result = _running.get()
    if result is None or result.task.func is not run_locked:
        return None
    return result
