"""A TCP proxy that delays every chunk it forwards and counts round trips.

This kernel has no ``tc netem``, so the network between an app server and its
database is imitated in user space: a process of its own (not a thread of the
benchmark, which would compete with the clients for the GIL) that forwards each
chunk ``delay`` seconds after it arrived, in both directions, keeping order and
never holding back the chunks behind it (a pipe with latency, not a slow pipe).

It also counts, over all connections:

- round trips: each time the client sends after the server last spoke (a
  client that pipelines several messages before waiting counts once);
- PostgreSQL protocol messages from the client by type (``Q`` simple query,
  ``E`` execute, ``S`` sync ...), when ``postgres=True``, and the statements
  they carry (an ``E`` runs one, a ``Q`` as many as its text holds, split at
  semicolons): the statements the server ran, BEGIN and COMMIT included.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from dataclasses import dataclass
from multiprocessing import get_context
from multiprocessing.sharedctypes import Synchronized
from typing import Any

_ctx = get_context("spawn")
# Counted PostgreSQL message types, in the shared array's order.
PG_TYPES = b"QPBESDCHX"
_STATEMENTS = "statements"  # the slot after the message types
_CHUNK = 1 << 16


@dataclass(frozen=True)
class Counts:
    round_trips: int
    messages: dict[str, int]

    def __sub__(self, other: Counts) -> Counts:
        return Counts(
            self.round_trips - other.round_trips,
            {k: v - other.messages.get(k, 0) for k, v in self.messages.items()},
        )

    @property
    def statements(self) -> int:
        return self.messages.get(_STATEMENTS, 0)


class DelayProxy:
    """``with DelayProxy(host, port, delay=0.0005) as proxy:`` then connect to
    ``proxy.port``; ``proxy.counts()`` reads the counters."""

    def __init__(self, host: str, port: int, *, delay: float, postgres: bool = False) -> None:
        self.target = (host, port)
        self.delay = delay
        self.postgres = postgres
        self._turns: Synchronized[int] = _ctx.Value("q", 0)
        self._messages: Any = _ctx.Array("q", len(PG_TYPES) + 1)
        self._process: Any = None
        self.port = 0

    def __enter__(self) -> DelayProxy:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(256)
        self.port = listener.getsockname()[1]
        self._process = _ctx.Process(
            target=_serve,
            args=(listener, self.target, self.delay, self.postgres, self._turns, self._messages),
            daemon=True,
        )
        self._process.start()
        listener.close()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._process is not None:
            self._process.terminate()  # the proxy's own process, by its handle
            self._process.join(5)

    def counts(self) -> Counts:
        with self._turns.get_lock():
            turns = self._turns.value
        with self._messages.get_lock():
            messages = {chr(t): self._messages[i] for i, t in enumerate(PG_TYPES)}
            messages[_STATEMENTS] = self._messages[len(PG_TYPES)]
        return Counts(turns, messages)


def _serve(
    listener: socket.socket,
    target: tuple[str, int],
    delay: float,
    postgres: bool,
    turns: Any,
    messages: Any,
) -> None:
    async def main() -> None:
        server = await asyncio.start_server(
            lambda r, w: _connection(r, w, target, delay, postgres, turns, messages),
            sock=listener,
        )
        async with server:
            await server.serve_forever()

    asyncio.run(main())


async def _connection(
    client_reader: asyncio.StreamReader,
    client_writer: asyncio.StreamWriter,
    target: tuple[str, int],
    delay: float,
    postgres: bool,
    turns: Any,
    messages: Any,
) -> None:
    server_reader, server_writer = await asyncio.open_connection(*target)
    for writer in (client_writer, server_writer):
        writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    last = ["server"]  # who spoke last
    parser = _PgParser(messages) if postgres else None

    def on_client(data: bytes) -> None:
        if last[0] != "client":
            last[0] = "client"
            with turns.get_lock():
                turns.value += 1
        if parser is not None:
            parser.feed(data)

    def on_server(data: bytes) -> None:
        last[0] = "server"

    await asyncio.gather(
        _pipe(client_reader, server_writer, delay, on_client),
        _pipe(server_reader, client_writer, delay, on_server),
        return_exceptions=True,
    )
    for writer in (client_writer, server_writer):
        with contextlib.suppress(Exception):
            writer.close()


async def _pipe(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float, seen: Any
) -> None:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def forward() -> None:
        while True:
            due, data = await queue.get()
            if not data:
                writer.close()
                return
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()

    forwarding = asyncio.ensure_future(forward())
    try:
        while True:
            data = await reader.read(_CHUNK)
            if data:
                seen(data)
            queue.put_nowait((loop.time() + delay, data))
            if not data:
                break
        await forwarding
    finally:
        forwarding.cancel()


class _PgParser:
    """Splits the client's byte stream into protocol messages and counts them by type."""

    def __init__(self, messages: Any) -> None:
        self.messages = messages
        self.buffer = b""
        self.started = False  # the untyped startup messages are behind us

    def feed(self, data: bytes) -> None:
        self.buffer += data
        while True:
            if not self.started:
                if len(self.buffer) < 8:
                    return
                length, code = struct.unpack("!ii", self.buffer[:8])
                if len(self.buffer) < length:
                    return
                self.buffer = self.buffer[length:]
                # SSL / GSS encryption requests come before the startup message.
                self.started = code not in (80877103, 80877104)
                continue
            if len(self.buffer) < 5:
                return
            kind = self.buffer[0]
            (length,) = struct.unpack("!i", self.buffer[1:5])
            if len(self.buffer) < 1 + length:
                return
            body, self.buffer = self.buffer[5 : 1 + length], self.buffer[1 + length :]
            index = PG_TYPES.find(bytes([kind]))
            if index < 0:
                continue
            statements = 0
            if kind == ord("Q"):  # our statements hold no semicolons in literals
                statements = sum(1 for part in body.rstrip(b"\0").split(b";") if part.strip())
            elif kind == ord("E"):
                statements = 1
            with self.messages.get_lock():
                self.messages[index] += 1
                self.messages[len(PG_TYPES)] += statements
