"""What PostgreSQL's statements of a shared acquisition (``shared_take``) and
of a release (``release``) share.

Each locks the resource's row (``FOR UPDATE``, the CTE ``locked``), and decides
on what that lock returned: the row as the last transaction left it. Other
tables are read in the statement's snapshot, which can predate that
transaction: so the decisions that must be exact read only the row (its owner,
expiry, limit and ``hold_count``, which counts the shared holds, never fewer
than are valid), and a case the row cannot settle (a permit when the count
says the semaphore is full, an upgrade, a downgrade, another kind) answers
``PORTABLE``: the backend's portable operation then decides, reading the holds
under the lock.
"""

from __future__ import annotations

from django_dlock.backends.tables import LockTables
from django_dlock.django_private import compile_expression
from django_dlock.rules.clock import DatabaseNow
from django_dlock.rules.predicates import HELD, HELD_BY_SHARED

# The answer (first column) that leaves the case to the portable operation.
PORTABLE = "portable"


class LockedRow:
    """The SQL of the resource's row as the CTE ``locked`` locks it, on one alias.
    Only quoted identifiers, constants and Django-compiled SQL are formatted in;
    values are parameters."""

    def __init__(self, tables: LockTables) -> None:
        c = tables.column_sql
        holds, h = tables.holds_table, tables.hold_column_sql
        #: The database's now.
        self.now, _ = compile_expression(tables.using, DatabaseNow())
        now = self.now
        #: The CTE ``locked``: the resource's row and the database's now, locked.
        self.cte = (
            f"WITH locked AS (SELECT {', '.join(tables.columns)}, {now} AS db_now "  # noqa: S608
            f"FROM {tables.table} WHERE {c['resource']} = %(resource)s FOR UPDATE)"
        )
        #: The locked row (``l``) has a valid holder.
        self.held = HELD.sql(tables.sql_row.aliased("l."))
        #: The locked row (``l``) is held by valid shared holds.
        self.shared = HELD_BY_SHARED.sql(tables.sql_row.aliased("l."))
        #: The columns of a shared hold, named by its table.
        self.hold_columns = ", ".join(f"{holds}.{h[name]}" for name in tables.hold_attnames)
