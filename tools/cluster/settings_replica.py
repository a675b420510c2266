"""Settings with a streaming replica (DLOCK_REPLICA_URL) and a router that
sends every read to it, for ``tools.cluster.replica_check``."""

from __future__ import annotations

import os

import dj_database_url

from tools.cluster.settings_pgbouncer import *  # noqa: F403
from tools.cluster.settings_pgbouncer import DATABASES

_replica = dj_database_url.parse(os.environ["DLOCK_REPLICA_URL"])
# Declared the Django way, as a test mirror of the primary...
DATABASES["replica"] = {**_replica, "TEST": {"MIRROR": "default"}}
# ...and the same server, undeclared: only asking it tells it is a replica.
DATABASES["replica_unmarked"] = _replica.copy()
DATABASE_ROUTERS = ["tools.cluster.routers.ReadsToReplica"]
# Sessions in cookies: a session written to the primary would not yet be on
# the (paused) replica that the router reads it from.
SESSION_ENGINE = "django.contrib.sessions.backends.signed_cookies"
