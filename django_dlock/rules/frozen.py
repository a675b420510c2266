"""Frozen dataclasses that are made as fast as plain ones: the values every
lock operation builds (a ``Claim``, the ``LockRow`` of each row it reads, what
it did: ``Taken``, ``Released``).

A frozen dataclass's ``__init__`` sets each field with ``object.__setattr__``,
the frozen ``__setattr__`` being in the way of a plain assignment: the
generic call, the attribute's look-up in the class and its descriptor's call,
for every field. An acquisition and a release build four of them, and that
cost the client as much CPU as validating every argument. ``fast_init`` gives
such a class an ``__init__`` of the same signature that calls each slot's
descriptor directly. The class stays what it was: frozen (an assignment
raises ``FrozenInstanceError``), equal, hashed, replaced and pickled as a
dataclass.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

__all__ = ["fast_init"]

_T = TypeVar("_T")


def fast_init(cls: type[_T]) -> type[_T]:
    """``cls`` (a frozen dataclass with slots, applied after ``@dataclass``)
    with an ``__init__`` that sets its slots directly: the same parameters,
    order, defaults and keyword-only ones as the dataclass's own."""
    params = cls.__dataclass_params__  # type: ignore[attr-defined]
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    if not (params.frozen and "__slots__" in cls.__dict__) or hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__}: fast_init is for frozen dataclasses with slots")
    names: dict[str, Any] = {}
    positional: list[str] = []
    keyword: list[str] = []
    body: list[str] = []
    for field in fields:
        if not field.init or field.default_factory is not dataclasses.MISSING:
            raise TypeError(f"{cls.__name__}.{field.name}: fast_init takes plain fields only")
        # Each slot's descriptor, whose __set__ the frozen __setattr__ does not guard.
        names[f"_set_{field.name}"] = cls.__dict__[field.name].__set__
        param = field.name
        if field.default is not dataclasses.MISSING:
            names[f"_default_{field.name}"] = field.default
            param = f"{field.name}=_default_{field.name}"
        (keyword if field.kw_only else positional).append(param)
        body.append(f"    _set_{field.name}(self, {field.name})")
    signature = ", ".join(["self", *positional, *(["*", *keyword] if keyword else [])])
    namespace: dict[str, Any] = {}
    # (Generated as dataclasses generates its own: a function of fixed parameters.)
    exec(f"def __init__({signature}):\n" + "\n".join(body or ["    pass"]), names, namespace)  # noqa: S102
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    cls.__init__ = init  # type: ignore[method-assign]
    return cls
