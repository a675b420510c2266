"""The private parts of Django that django-dlock reads, each with why no public
API serves, in one place: a Django upgrade that changes one of them breaks here.

- ``Atomic._from_testcase``: whether a transaction is the one Django's
  ``TestCase`` wraps each test in. Django has no public way to tell; its own
  ``atomic(durable=True)`` checks this attribute for the same reason.
- ``DatabaseWrapper.atomic_blocks``: how many ``atomic()`` blocks are open on
  a connection. ``in_atomic_block`` says only whether one is; a lock operation
  must know whether its own block is the outermost (then it may commit in one
  round trip, and may run again after a lost race).
- SQLite's ``DatabaseWrapper.transaction_mode``: the ``BEGIN`` mode that
  ``atomic()`` uses (``OPTIONS["transaction_mode"]``, Django 5.1+). There is no
  public way to begin one transaction ``IMMEDIATE`` on a connection configured
  otherwise.
- The SQL compiler (``Query``, ``SQLCompiler.compile``, ``.select``,
  ``.get_converters``, ``Query.build_where``): the hot path runs SQL that the
  ORM wrote once, converting its rows as the ORM would. ``QuerySet.raw()`` would
  compile and build model instances on every call, and no public API gives an
  expression's SQL or a query's converters.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import connections
from django.db.models import Model, Q, QuerySet
from django.db.models.sql import Query

#: {column index: (converters, expression)}, as ``SQLCompiler.get_converters``.
Converters = dict[int, tuple[list[Any], Any]]


def innermost_atomic_is_testcase(connection: Any) -> bool:
    """Whether the innermost ``atomic()`` block open on ``connection`` is the
    transaction Django's ``TestCase`` wraps each test in."""
    blocks = connection.atomic_blocks
    return bool(blocks) and bool(getattr(blocks[-1], "_from_testcase", False))


@contextmanager
def sqlite_begin_immediate(connection: Any) -> Iterator[None]:
    """While inside, ``atomic()`` on the (connected) SQLite ``connection``
    begins with ``BEGIN IMMEDIATE`` (unless it is configured ``EXCLUSIVE``,
    which excludes even more)."""
    configured_mode = connection.transaction_mode
    if configured_mode != "EXCLUSIVE":
        connection.transaction_mode = "IMMEDIATE"
    try:
        yield
    finally:
        connection.transaction_mode = configured_mode


def atomic_depth(connection: Any) -> int:
    """How many ``atomic()`` blocks are open on ``connection``."""
    return len(connection.atomic_blocks)


def compile_expression(using: str, expression: Any) -> tuple[str, list[Any]]:
    """SQL and parameters of ``expression`` as Django writes it for ``using``."""
    query = Query(None)
    compiler = query.get_compiler(using=using)
    sql, params = compiler.compile(expression.resolve_expression(query))
    return sql, list(params)


def compile_where(model: type[Model], using: str, condition: Q) -> tuple[str, list[Any]]:
    """SQL and parameters of ``condition`` on ``model``'s table, for a WHERE."""
    query = Query(model)
    compiler = query.get_compiler(using=using)
    sql, params = query.build_where(condition).as_sql(compiler, connections[using])
    return sql, list(params)


def compile_select(queryset: QuerySet[Any]) -> tuple[str, list[Any], int, Converters]:
    """A queryset's SQL, parameters, number of selected columns, and the
    converters of those columns."""
    compiler = queryset.query.get_compiler(using=queryset.db)
    sql, params = compiler.as_sql()
    selected = [expression for expression, _, _ in compiler.select]
    return sql, list(params), len(selected), compiler.get_converters(selected)
