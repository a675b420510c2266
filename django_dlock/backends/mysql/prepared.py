"""The exclusive lock's one-row statements (``one_row``), prepared on the
server once per connection and run by name.

An acquisition's ``UPDATE`` is long: MariaDB parsing and resolving it again on
every call cost the server more than running it, and the client more to quote
and send. SQL ``PREPARE`` (mysqlclient speaks only the text protocol) parses
it once per session; ``EXECUTE ... USING`` then sends only the values, as
literals that the client quotes as it quotes any parameter.

Preparing costs a round trip of its own (mysqlclient sends one statement at a
time), which a connection that runs a statement once or twice would not win
back: Django's connections last one request by default (``CONN_MAX_AGE``
0). A statement runs inline, its values quoted into its text, until its
``PREPARE_AT``-th run in a session, which prepares it.

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
from dataclasses import dataclass, field
from typing import Any, cast

# MariaDB's "Unknown prepared statement handler (%s) given to EXECUTE".
ER_UNKNOWN_STMT_HANDLER = 1243
# The server holds as many prepared statements as ``max_prepared_stmt_count``
# allows, all sessions together.
ER_MAX_PREPARED_STMT_COUNT_REACHED = 1461
# The run of a statement, in one session, that prepares it.
PREPARE_AT = 3
_PLACEHOLDER = re.compile(r"%\((\w+)\)s")


class Statement:
    """One statement of ``one_row``, with ``%(name)s`` placeholders: the body
    that ``PREPARE`` parses (``?`` for each placeholder, in order), the
    ``EXECUTE`` that runs it with the values in that order, and the statement
    inline."""

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
        self._pieces = [piece.encode() for piece in self.body.split("?")]
        self._execute = f"EXECUTE {name}".encode()

    def execute_sql(self, raw: Any, params: dict[str, Any]) -> bytes:
        """The ``EXECUTE`` with ``params`` quoted by ``raw``."""
        if not self.parameters:
            return self._execute
        return self._execute + b" USING " + b", ".join(self._values(raw, params))

    def inline_sql(self, raw: Any, params: dict[str, Any]) -> bytes:
        """The statement with ``params`` quoted into it by ``raw``."""
        pieces, values = self._pieces, self._values(raw, params)
        parts = [pieces[0]]
        for value, piece in zip(values, pieces[1:], strict=True):
            parts += (value, piece)
        return b"".join(parts)

    def _values(self, raw: Any, params: dict[str, Any]) -> list[bytes]:
        # Each value quoted once, however often the statement repeats it.
        quoted = {name: _literal(raw, params[name]) for name in self.distinct}
        return [quoted[name] for name in self.parameters]


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


@dataclass
class _Session:
    """What one connection's server session has run and prepared."""

    runs: dict[str, int] = field(default_factory=dict)
    prepared: set[str] = field(default_factory=set)


class PreparedStatements:
    """Runs statements, prepared from their ``PREPARE_AT``-th run, remembering
    per mysqlclient connection what its session has prepared. Each statement
    is sent with mysqlclient's ``query``: a cursor's bookkeeping (its
    parameters' formatting, the description of each result) costs the client
    more than the round trip."""

    def __init__(self) -> None:
        # A connection belongs to one thread: each key is only touched by its own.
        self._sessions: weakref.WeakKeyDictionary[Any, _Session] = weakref.WeakKeyDictionary()

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
        session = self._sessions.get(raw)
        if session is None:
            session = self._sessions[raw] = _Session()
        name = statement.name
        if name in session.prepared:
            try:
                raw.query(statement.execute_sql(raw, params))
                return
            except raw.Error as error:
                if not error.args or error.args[0] != ER_UNKNOWN_STMT_HANDLER:
                    raise
                session.prepared.clear()  # the session lost them all
        else:
            runs = session.runs[name] = session.runs.get(name, 0) + 1
            if runs < PREPARE_AT:
                raw.query(statement.inline_sql(raw, params))
                return
        try:
            raw.query(b"PREPARE " + name.encode() + b" FROM " + raw.literal(statement.body))
        except raw.Error as error:
            if not error.args or error.args[0] != ER_MAX_PREPARED_STMT_COUNT_REACHED:
                raise
            # Inline this time, and prepared again after as many runs.
            session.runs[name] = 0
            raw.query(statement.inline_sql(raw, params))
            return
        session.prepared.add(name)
        raw.query(statement.execute_sql(raw, params))
