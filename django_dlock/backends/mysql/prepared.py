"""The exclusive lock's one-row statements (``one_row``), prepared on the
server once per connection and run by name.

An acquisition's ``UPDATE`` is long: MariaDB parsing and resolving it again on
every call cost the server more than running it, and the client more to quote
and send. SQL ``PREPARE`` (mysqlclient speaks only the text protocol) parses
it once per session; ``EXECUTE ... USING`` then sends only the values, as
literals that the client quotes as it quotes any parameter.

A prepared statement belongs to the server session: a new connection (Django
reconnects with a new mysqlclient connection object) prepares again, and a
session that lost its statements (``COM_RESET_CONNECTION``, a proxy that
changed the session under the connection) answers error 1243, after which
the statement is prepared again and run: the failed ``EXECUTE`` ran nothing.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Sequence
from typing import Any, cast

# MariaDB's "Unknown prepared statement handler (%s) given to EXECUTE".
ER_UNKNOWN_STMT_HANDLER = 1243
_PLACEHOLDER = re.compile(r"%\((\w+)\)s")


class Statement:
    """One statement of ``one_row``, with ``%(name)s`` placeholders: the body
    that ``PREPARE`` parses (``?`` for each placeholder, in order) and the
    ``EXECUTE`` that runs it with the values in that order."""

    def __init__(self, name: str, sql: str) -> None:
        # The body is sent as a string literal, not formatted: an escaped
        # percent would stay doubled, and a question mark would become a
        # parameter.
        if "%%" in sql or "?" in sql:
            raise ValueError(f"cannot prepare {name!r}: it contains '%%' or '?'")
        self.name = name
        self.sql = sql
        self.parameters = tuple(_PLACEHOLDER.findall(sql))
        self.distinct = tuple(dict.fromkeys(self.parameters))
        self.body = _PLACEHOLDER.sub("?", sql)
        self.execute_head = f"EXECUTE {name} USING ".encode() if self.parameters else None
        self.execute_bare = f"EXECUTE {name}".encode()

    def execute_sql(self, raw: Any, params: dict[str, Any]) -> bytes:
        """The ``EXECUTE`` with ``params`` quoted by ``raw``, each value once
        however often the statement repeats it."""
        if self.execute_head is None:
            return self.execute_bare
        quoted = {name: _literal(raw, params[name]) for name in self.distinct}
        return self.execute_head + b", ".join([quoted[name] for name in self.parameters])


def _literal(raw: Any, value: Any) -> bytes:
    # The lock operations' values are text, integers and NULL; anything else
    # is quoted by mysqlclient's encoders, as a cursor would.
    if value is None:
        return b"NULL"
    if type(value) is int:
        return b"%d" % value
    if type(value) is str:  # as mysqlclient's literal() quotes text
        return bytes(raw.string_literal(value.encode(raw.encoding)))
    return bytes(raw.literal(value))


class PreparedStatements:
    """Runs statements prepared, remembering per mysqlclient connection which
    of them its session has prepared. Each statement is sent with
    mysqlclient's ``query``: a cursor's bookkeeping (its parameters'
    formatting, the description of each result) costs the client more than
    the round trip."""

    def __init__(self) -> None:
        # A connection belongs to one thread: each key is only touched by its own.
        self._sessions: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()

    def execute(self, raw: Any, statement: Statement, params: dict[str, Any]) -> int:
        """Run ``statement``, which answers no rows, with ``params`` on the
        mysqlclient connection ``raw``; the rows it matched (Django connects
        with ``CLIENT.FOUND_ROWS``)."""
        self._query(raw, statement, params)
        return int(raw.affected_rows())

    def fetch_one(
        self, raw: Any, statement: Statement, params: dict[str, Any]
    ) -> Sequence[Any] | None:
        """Run ``statement``, a ``SELECT``, with ``params`` on ``raw``; its first
        row, converted by the connection's converters as a cursor's would be."""
        self._query(raw, statement, params)
        rows = raw.store_result().fetch_row()
        return cast(Sequence[Any], rows[0]) if rows else None

    def _query(self, raw: Any, statement: Statement, params: dict[str, Any]) -> None:
        prepared = self._sessions.setdefault(raw, set())
        sql = statement.execute_sql(raw, params)
        if statement.name in prepared:
            try:
                raw.query(sql)
                return
            except raw.Error as error:
                if not error.args or error.args[0] != ER_UNKNOWN_STMT_HANDLER:
                    raise
                prepared.clear()  # the session lost them all
        raw.query(b"PREPARE " + statement.name.encode() + b" FROM " + raw.literal(statement.body))
        prepared.add(statement.name)
        raw.query(sql)

    def forget(self, raw: Any) -> None:
        """Treat ``raw``'s session as having prepared nothing (tests)."""
        self._sessions.pop(raw, None)
