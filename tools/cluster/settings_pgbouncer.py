"""The test settings, for a database reached through PgBouncer in transaction
pooling: consecutive transactions may run on different server connections,
so Django must not keep a server-side cursor open across them."""

from __future__ import annotations

from tests.settings import *  # noqa: F403
from tests.settings import DATABASES

for _alias in ("default", "locks"):
    DATABASES[_alias]["DISABLE_SERVER_SIDE_CURSORS"] = True
