"""What SQLite's lock backend can do."""

from __future__ import annotations

import sys
from functools import cached_property

from django_dlock.backends.features import BackendFeatures


class SQLiteFeatures(BackendFeatures):
    # Every process of a SQLite database runs on its host.
    waiters_share_host = True
    grants_on_release = True
    grants_shared_on_release = True
    listener_class = "django_dlock.listeners.sqlite.DatagramListener"

    @cached_property
    def can_listen(self) -> bool:
        # The datagrams go to abstract Unix sockets, which only Linux has.
        return sys.platform == "linux"
