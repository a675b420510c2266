"""Server-side prepared statements for the PostgreSQL backend's lock operations.

Planning an operation's statement costs the server more than running it (the
acquisition: see the docs' performance page), so each database session prepares
each statement once (SQL ``PREPARE``, sent in the same message as its first
``EXECUTE``) and runs it by name afterwards. Django's execute wrappers and
query log see both, as every other statement.

A prepared statement belongs to one server session. Behind a connection pooler
in transaction mode (PgBouncer) the next statement may run in another session,
where it does not exist: the first such failure turns preparing off for the
database alias in this process, and the operation runs again as plain SQL
(nothing was written: the failed statement ran alone, in autocommit).
"""

from __future__ import annotations

import logging
import re
import secrets
import weakref
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger("django_dlock")

# The PostgreSQL type of each parameter of the lock operations' statements.
PARAMETER_TYPES = {
    "resource": "text",
    "owner": "text",
    "duration": "interval",
    "ticket": "bigint",
    "held": "bigint",
    "channel": "text",
    "reentrant": "integer",
    "label": "text",
    "limit": "integer",
    "lock_delay": "interval",
    "offer_lease": "interval",  # rules.grant's
    "grant_mark": "interval",
    "wait": "interval",  # a waiter's: how long its ticket lasts unrefreshed
    "ttl": "interval",
    "mode": "text",
    "listener_pid": "integer",
    "ticket_step": "bigint",  # backends.tickets
    "ticket_spread": "bigint",
    "ticket_after": "bigint",
    "key": "text",  # a throttle's
    "rate": "text",
}
# SQLSTATEs of a prepared statement that is missing (invalid_sql_statement_name),
# or that exists already (duplicate_prepared_statement): another session's.
SESSION_CHANGED = {"26000", "42P05"}
_PLACEHOLDER = re.compile(r"%\((\w+)\)s")


class Statement:
    """One operation's SQL (``%(name)s`` placeholders), inline and prepared."""

    def __init__(self, name: str, sql: str) -> None:
        self.name = name
        self.sql = sql
        self.parameters = list(dict.fromkeys(_PLACEHOLDER.findall(sql)))
        types = ", ".join(PARAMETER_TYPES[parameter] for parameter in self.parameters)
        body = _PLACEHOLDER.sub(lambda match: f"${self.parameters.index(match[1]) + 1}", sql)
        self._prepare = f"PREPARE {{name}} ({types}) AS {body}"
        arguments = ", ".join(f"%({parameter})s" for parameter in self.parameters)
        self._execute = f"EXECUTE {{name}}({arguments})"

    def prepare_sql(self, name: str) -> str:
        return self._prepare.format(name=name)

    def execute_sql(self, name: str) -> str:
        return self._execute.format(name=name)


@dataclass
class _Session:
    """What one connection's server session has prepared."""

    # statement -> its EXECUTE of the prepared name (made once: each run sends it)
    prepared: dict[str, str] = field(default_factory=dict)
    attempts: int = 0  # PREPAREs sent: names never repeat in a session


class PreparedStatements:
    """Runs the lock operations' statements prepared, per connection, while it works."""

    def __init__(self, using: str) -> None:
        self.using = using
        self.enabled = True
        # Other clients' sessions (behind a pooler) must not share our names.
        self._prefix = f"dlock_{secrets.token_hex(4)}"
        self._sessions: weakref.WeakKeyDictionary[Any, _Session] = weakref.WeakKeyDictionary()

    def execute(self, cursor: Any, raw: Any, statement: Statement, params: dict[str, Any]) -> None:
        """Run ``statement`` with ``params`` on ``cursor`` (Django's, or psycopg's
        own), a cursor of the psycopg connection ``raw`` in autocommit; its
        result is the cursor's current one."""
        if not self.enabled:
            cursor.execute(statement.sql, params)
            return
        session = self._sessions.get(raw)
        if session is None:  # (a new _Session only for a new connection)
            session = self._sessions[raw] = _Session()
        sql = session.prepared.get(statement.name)
        preparing = sql is None
        if preparing:
            # A new name each time: a PREPARE whose message failed may have run.
            session.attempts += 1
            name = f"{self._prefix}_{statement.name}_{session.attempts}"
            executes = statement.execute_sql(name)
            sql = f"{statement.prepare_sql(name)};\n{executes}"
        try:
            cursor.execute(sql, params)
        except Exception as error:
            # Django's DatabaseError (its cursor) wraps psycopg's (a cursor of
            # psycopg's own, which the caller's wrap_database_errors converts).
            sqlstate = getattr(error, "sqlstate", None) or getattr(
                error.__cause__, "sqlstate", None
            )
            if sqlstate not in SESSION_CHANGED:
                raise
            self.enabled = False
            logger.info(
                "django-dlock: database %r runs statements in more than one server "
                "session per connection (a connection pooler in transaction mode?); "
                "lock operations are no longer prepared.",
                self.using,
            )
            cursor.execute(statement.sql, params)
            return
        if preparing:
            session.prepared[statement.name] = executes
            cursor.nextset()  # from PREPARE's result to EXECUTE's
