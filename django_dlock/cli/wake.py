"""``Wake``: what wakes ``dlock run``'s loop, set from threads and from a signal
handler alike.

A ``threading.Event`` cannot be set from a signal handler: Python runs the
handler in the main thread between two of its bytecodes, and where that thread
was inside the event's own ``clear()`` or ``wait()`` (holding the event's lock,
which is not reentrant), the handler's ``set()`` waits for that lock for ever.
``Wake`` is a pipe: ``set()`` writes a byte (``os.write`` takes no lock), and
``wait()`` waits for the pipe to be readable.
"""

from __future__ import annotations

import contextlib
import os
import select

__all__ = ["Wake"]


class Wake:
    """An event over a non-blocking pipe: ``set``, ``clear``, ``wait``, ``close``."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)

    def set(self) -> None:
        """Wake the waiter (from any thread, or a signal handler)."""
        # (Full: already set; closed: nobody waits any more.)
        with contextlib.suppress(OSError):
            os.write(self._write, b"!")

    def clear(self) -> None:
        """Forget the wakes so far."""
        try:
            while os.read(self._read, 512):
                pass
        except BlockingIOError:
            pass

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a ``set()``; whether one came."""
        # (At most an hour: select() takes no timeout as long as threading.TIMEOUT_MAX;
        # the callers' loops look again.)
        readable, _, _ = select.select([self._read], [], [], min(max(timeout, 0.0), 3600.0))
        return bool(readable)

    def close(self) -> None:
        os.close(self._read)
        os.close(self._write)
