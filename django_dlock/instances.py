"""Model instances of the rows a lock operation answers, as ``Model.from_db()``
makes them, at the least cost where nothing can tell the difference.

``from_db()`` calls ``Model.__init__``, which sends ``pre_init`` and
``post_init`` and sets each field through ``setattr``: a fifth of what the
client spent on an acquisition's hold beside its statement. Where the model
has neither signal's receiver and is made as Django's ``Model`` makes it
(``plain``), the instance is made directly: its ``_state`` as ``from_db()``
leaves it, its fields' values in its ``__dict__``.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Mapping
from typing import TypeVar

from django.db import models
from django.db.models.base import ModelState
from django.db.models.query_utils import DeferredAttribute
from django.db.models.signals import post_init, pre_init

__all__ = ["attnames", "from_db", "plain"]

_M = TypeVar("_M", bound=models.Model)


def from_db(model: type[_M], using: str, values: Mapping[str, object]) -> _M:
    """``model.from_db(using, ...)`` of ``values`` (by attname; every concrete field's)."""
    names = attnames(model)
    # (A signal with no receiver at all has none for ``model``: its list is
    # read first, without has_listeners()' two calls.)
    if (
        not plain(model)
        or (pre_init.receivers and pre_init.has_listeners(model))
        or (post_init.receivers and post_init.has_listeners(model))
    ):
        return model.from_db(using, names, [values[name] for name in names])
    instance = model.__new__(model)
    state = instance._state = ModelState()
    state.adding = False
    state.db = using
    if isinstance(values, dict) and tuple(values) == _names(model):
        # The values by attname in the fields' order already (a lock's row,
        # ``LockRow.field_values``): the instance's __dict__ as from_db() leaves it.
        instance.__dict__.update(values)
    else:
        instance.__dict__.update(zip(names, _pick(model)(values), strict=True))
    return instance


@functools.cache
def plain(model: type[models.Model]) -> bool:
    """Whether ``from_db()`` makes ``model``'s instances as Django's ``Model``
    does (neither it nor ``__init__`` overridden), and every concrete field's
    class attribute is Django's plain one (``DeferredAttribute``, which a value
    in the instance's ``__dict__`` shadows: no setter runs)."""
    return (
        model.from_db.__func__ is models.Model.from_db.__func__  # type: ignore[attr-defined]
        and model.__init__ is models.Model.__init__
        and not model._meta.abstract
        and all(type(getattr(model, name, None)) is DeferredAttribute for name in attnames(model))
    )


@functools.cache
def _pick(model: type[models.Model]) -> Callable[[Mapping[str, object]], tuple[object, ...]]:
    """The values of ``attnames(model)`` from a mapping, in their order, in one
    call of C (a generator over the names costs a resumption per field)."""
    names = attnames(model)
    getter = operator.itemgetter(*names)
    return getter if len(names) > 1 else lambda values: (getter(values),)


@functools.cache
def _names(model: type[models.Model]) -> tuple[str, ...]:
    return tuple(attnames(model))


@functools.cache
def attnames(model: type[models.Model]) -> list[str]:
    """The model's concrete fields' attnames, in the order ``from_db()`` takes values."""
    return [field.attname for field in model._meta.concrete_fields]
