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

import operator
import re
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

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
        self._execute_using = self._execute + b" USING "
        # The values in the parameters' order, in one call of C (a list
        # comprehension is a call of its own).
        self._in_order: Callable[[dict[str, bytes]], Sequence[bytes]] | None = None
        if len(self.parameters) > 1:
            self._in_order = operator.itemgetter(*self.parameters)
        elif self.parameters:
            only = self.parameters[0]
            self._in_order = lambda quoted: (quoted[only],)

    def quote(self, raw: Any, params: dict[str, Any], quoted: dict[str, bytes]) -> None:
        """Add to ``quoted`` the values of this statement's parameters that it
        lacks, quoted by ``raw``: each value once, however often a statement
        repeats it, and once for the statements of one operation."""
        for name in self.distinct:
            if name in quoted:
                continue
            # The lock operations' values are text, integers and NULL; anything
            # else is quoted by mysqlclient's encoders, as a cursor would.
            # (Inline, not a function: one call fewer per value.)
            value = params[name]
            if type(value) is str:  # as mysqlclient's literal() quotes text
                quoted[name] = raw.string_literal(value.encode(raw.encoding))
            elif type(value) is int:
                quoted[name] = b"%d" % value
            elif value is None:
                quoted[name] = b"NULL"
            else:
                quoted[name] = bytes(raw.literal(value))

    def execute_sql(self, quoted: dict[str, bytes]) -> bytes:
        """The ``EXECUTE`` with the values ``quoted`` (``quote``)."""
        if self._in_order is None:
            return self._execute
        return self._execute_using + b", ".join(self._in_order(quoted))

    def inline_sql(self, quoted: dict[str, bytes]) -> bytes:
        """The statement with the values ``quoted`` (``quote``) in it."""
        pieces = self._pieces
        parts = [pieces[0]]
        for name, piece in zip(self.parameters, pieces[1:], strict=True):
            parts += (quoted[name], piece)
        return b"".join(parts)


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

    def update_and_read(
        self, raw: Any, update: Statement, read: Statement, params: dict[str, Any]
    ) -> Sequence[Any] | None:
        """Run ``update``, which answers no rows, with ``params`` on the
        mysqlclient connection ``raw``, and where it matched one row (Django
        connects with ``CLIENT.FOUND_ROWS``: the rows matched, changed or
        not), ``read``, a ``SELECT``: its first row, converted as ``fetch_one``
        converts it; None where ``update`` matched none, or several. (The
        session looked up, and each value quoted, once for both.)"""
        session = self._sessions.get(raw) or self._session(raw)
        quoted: dict[str, bytes] = {}
        update.quote(raw, params, quoted)
        self._query(raw, session, update, quoted)
        if raw.affected_rows() != 1:
            return None
        read.quote(raw, params, quoted)
        self._query(raw, session, read, quoted)
        rows: Sequence[Sequence[Any]] = raw.store_result().fetch_row()
        return rows[0] if rows else None

    def fetch_one(
        self, raw: Any, statement: Statement, params: dict[str, Any]
    ) -> Sequence[Any] | None:
        """Run ``statement``, a ``SELECT``, with ``params`` on ``raw``; its first
        row, converted by the connection's converters as a cursor's would be."""
        quoted: dict[str, bytes] = {}
        statement.quote(raw, params, quoted)
        self._query(raw, self._session(raw), statement, quoted)
        # (Annotated, not cast(): a call for nothing on every run.)
        rows: Sequence[Sequence[Any]] = raw.store_result().fetch_row()
        return rows[0] if rows else None

    def _session(self, raw: Any) -> _Session:
        session = self._sessions.get(raw)
        if session is None:  # (a new _Session only for a new connection)
            session = self._sessions[raw] = _Session()
        return session

    def _query(
        self, raw: Any, session: _Session, statement: Statement, quoted: dict[str, bytes]
    ) -> None:
        name = statement.name
        if name in session.prepared:
            try:
                raw.query(statement.execute_sql(quoted))
                return
            except raw.Error as error:
                if not error.args or error.args[0] != ER_UNKNOWN_STMT_HANDLER:
                    raise
                session.prepared.clear()  # the session lost them all
        else:
            runs = session.runs[name] = session.runs.get(name, 0) + 1
            if runs < PREPARE_AT:
                raw.query(statement.inline_sql(quoted))
                return
        try:
            raw.query(b"PREPARE " + name.encode() + b" FROM " + raw.literal(statement.body))
        except raw.Error as error:
            if not error.args or error.args[0] != ER_MAX_PREPARED_STMT_COUNT_REACHED:
                raise
            # Inline this time, and prepared again after as many runs.
            session.runs[name] = 0
            raw.query(statement.inline_sql(quoted))
            return
        session.prepared.add(name)
        raw.query(statement.execute_sql(quoted))
