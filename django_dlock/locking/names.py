"""Lock names built from a call's arguments: ``@lock("order:{order_id}")``.

One piece of code formats the resource of ``lock()`` used as a decorator, of
Celery's ``locked_task`` and of ``django_dlock.contrib.tasks``' ``locked_task``.
A template is a ``str.format`` string whose placeholders name parameters of the
decorated function (``{order_id}``, ``{order.pk}``, ``{day:%Y-%m-%d}``);
``{{`` and ``}}`` stand for literal braces. A placeholder that names no
parameter is refused when the function is decorated, never left in the name.
"""

from __future__ import annotations

import inspect
import string
from collections.abc import Callable, Collection
from typing import Any

__all__ = ["ResourceName"]

_FORMATTER = string.Formatter()


class ResourceName:
    """How one decorated function's calls name their lock.

    ``key`` is a template (see the module) or a function that takes the call's
    arguments and returns the resource. ``injected`` are parameters that the
    decorator fills itself (``fencing_token``): no placeholder may name them.
    Raises ``ValueError`` when the template names something the function's
    calls do not have.
    """

    def __init__(
        self,
        key: str | Callable[..., str],
        function: Callable[..., Any],
        *,
        injected: Collection[str] = (),
        what: str = "lock",
    ) -> None:
        self.key = key
        self.signature = inspect.signature(function)
        self.fields: tuple[str, ...] = ()
        self._literal: str | None = None
        if callable(key):
            return
        if not isinstance(key, str):
            raise TypeError(f"A {what} name must be a string or a function, not {key!r}.")
        self.fields = _fields(key, what)
        parameters = self.signature.parameters
        takes_any_keyword = any(p.kind is p.VAR_KEYWORD for p in parameters.values())
        for name in self.fields:
            parameter = parameters.get(name)
            if name in injected or (parameter is None and not takes_any_keyword):
                raise ValueError(
                    f"The {what} name {key!r} has the placeholder {{{name}}}, but "
                    f"{_function_name(function)}() has no parameter {name!r} to fill it "
                    f"from. Name a parameter, or double the braces ({{{{ and }}}}) for "
                    "literal ones."
                )
            if parameter is not None and parameter.kind in (parameter.VAR_POSITIONAL,):
                raise ValueError(
                    f"The {what} name {key!r} has the placeholder {{{name}}}, which names "
                    f"the *{name} parameter of {_function_name(function)}(): name a "
                    "single parameter."
                )
        if not self.fields:
            self._literal = _FORMATTER.vformat(key, (), {})  # only doubled braces to undo

    def format(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        """The resource of one call with ``args`` and ``kwargs`` (defaults applied)."""
        if callable(self.key):
            return self.key(*args, **kwargs)
        if self._literal is not None:
            return self._literal
        bound = self.signature.bind_partial(*args, **kwargs)
        bound.apply_defaults()
        values = dict(bound.arguments)
        for parameter in self.signature.parameters.values():
            if parameter.kind is parameter.VAR_KEYWORD:
                values.update(values.pop(parameter.name, {}))
        missing = [name for name in self.fields if name not in values]
        if missing:
            raise TypeError(
                f"Cannot name the lock {self.key!r}: the call has no argument "
                f"{missing[0]!r} for its placeholder {{{missing[0]}}}."
            )
        return _FORMATTER.vformat(self.key, (), values)


def _fields(template: str, what: str) -> tuple[str, ...]:
    """The parameter names that ``template``'s placeholders start with."""
    try:
        parsed = list(_FORMATTER.parse(template))
    except ValueError as error:
        raise ValueError(
            f"The {what} name {template!r} is not a valid template ({error}); "
            "double the braces ({{ and }}) for literal ones."
        ) from None
    names: list[str] = []
    for _, field, spec, _ in parsed:
        if field is None:
            continue
        root = field.split(".", 1)[0].split("[", 1)[0]
        if not root.isidentifier():
            raise ValueError(
                f"The {what} name {template!r} has the placeholder {{{field}}}: a "
                "placeholder names a parameter of the function ({order_id}); double the "
                "braces ({{ and }}) for literal ones."
            )
        names.append(root)
        if spec and "{" in spec:
            raise ValueError(
                f"The {what} name {template!r} nests a placeholder in a format spec; "
                "name each parameter in a placeholder of its own."
            )
    return tuple(dict.fromkeys(names))


def _function_name(function: Callable[..., Any]) -> str:
    return getattr(function, "__qualname__", None) or repr(function)
