"""The PostgreSQL listener: ``LISTEN`` on a connection of its own, on the
process's channel; a release ``NOTIFY``s the head's channel with its ticket.

Behind a connection pooler in transaction mode (PgBouncer) a ``LISTEN`` lands
on some server connection that the next transaction no longer has, so with
``DLOCK_LISTEN = "auto"`` (the default) the listener tells a pooler apart from
the server (a pooler reports its own process id to the client, not the
server's) and does not listen behind one: waiters poll, as with ``False``.
"""

from __future__ import annotations

import os
import select
from typing import TYPE_CHECKING, Any

from django.apps import apps
from django.db import connections

from django_dlock.conf import conf
from django_dlock.listeners.base import IDLE_TICK, Listener, logger

if TYPE_CHECKING:
    import psycopg


# The server's TCP keepalives on the listening connection (seconds, probes).
KEEPALIVES = {"tcp_keepalives_idle": 1, "tcp_keepalives_interval": 1, "tcp_keepalives_count": 2}


class PostgresListener(Listener["psycopg.Connection[Any]"]):
    """``LISTEN`` on a connection of its own; releases ``NOTIFY`` the channel."""

    shares_channels = True

    def _connect(self) -> psycopg.Connection[Any] | None:
        import psycopg

        params = connections[self.using].get_connection_params()
        for django_only in ("cursor_factory", "context", "prepare_threshold"):
            params.pop(django_only, None)
        connection = psycopg.connect(**params, autocommit=True)
        self.connects += 1
        (pid,) = connection.execute("SELECT pg_backend_pid()").fetchone() or (None,)
        if conf.LISTEN == "auto" and pid != connection.info.backend_pid:
            logger.info(
                "django-dlock: database %r is reached through a connection pooler; "
                "waiters poll instead of listening (set DLOCK_LISTEN = True if it "
                "pools sessions).",
                self.using,
            )
            connection.close()
            with self._lock:
                self.usable = False
                self._thread = None
                self._lock.notify_all()
                self._wake_all()
            return None
        self.backend_pid = pid
        connection.add_notify_handler(lambda notify: self._dispatch(notify.payload, notify.channel))
        return connection

    def _subscribe(self, connection: psycopg.Connection[Any]) -> None:
        from psycopg import sql

        # The server probes an idle connection after a second and drops it when
        # its host does not answer: a waiter on a host that was lost stops
        # counting (its ticket's listener_pid) within a few seconds.
        settings = [
            sql.SQL("SET {} = {}").format(sql.Identifier(setting), value)
            for setting, value in KEEPALIVES.items()
        ]
        # Tickets queued through an earlier connection (a reconnect) name its
        # server process, which is gone: they name this one from now on. (Not
        # for a process that only observes leaders: it has no tickets, and may
        # be allowed to read only.)
        meta = apps.get_model("django_dlock", "LockWaiter")._meta
        repoint = sql.SQL("UPDATE {} SET {} = pg_backend_pid() WHERE {} = {}").format(
            sql.Identifier(meta.db_table),
            sql.Identifier(str(meta.get_field("listener_pid").column)),
            sql.Identifier(str(meta.get_field("channel").column)),
            sql.Literal(self.channel),
        )
        listen = sql.SQL("LISTEN {}").format(sql.Identifier(self.channel))
        # One query of several statements, without parameters (the simple query
        # protocol): one round trip and one transaction, not one for each.
        statements = [*settings, listen, *([] if self.only_observers() else [repoint])]
        connection.execute(sql.SQL("; ").join(statements))

    def _receive(self, connection: psycopg.Connection[Any]) -> None:
        self._overhearing(lambda new, gone: self._listen(connection, new, gone))
        socket = connection.fileno()
        ready, _, _ = select.select([socket, self._wake_read], [], [], IDLE_TICK)
        if self._wake_read in ready:
            os.read(self._wake_read, 4096)
        if socket in ready:
            from psycopg import pq

            pgconn = connection.pgconn
            # Raises once the server closed the session (pg_terminate_backend).
            pgconn.consume_input()
            if pgconn.status != pq.ConnStatus.OK:
                raise ConnectionError("the listening connection broke")
            while (notify := pgconn.notifies()) is not None:
                self._dispatch(notify.extra.decode(), notify.relname.decode())

    def _listen(self, connection: psycopg.Connection[Any], new: set[str], gone: set[str]) -> None:
        """``LISTEN`` to the channels ``new`` and no longer to ``gone``, in one query."""
        from psycopg import sql

        statements = [sql.SQL("LISTEN {}").format(sql.Identifier(name)) for name in sorted(new)]
        statements += [sql.SQL("UNLISTEN {}").format(sql.Identifier(name)) for name in sorted(gone)]
        connection.execute(sql.SQL("; ").join(statements))

    def _close(self, connection: psycopg.Connection[Any]) -> None:
        connection.close()
