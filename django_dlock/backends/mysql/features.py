"""What MariaDB's (and MySQL's) lock backend can do."""

from __future__ import annotations

from django_dlock.backends.features import BackendFeatures


class MySQLFeatures(BackendFeatures):
    # The exclusive lock's acquisition and release are one UPDATE each
    # (``mysql.one_row``); no push: waiters poll with backoff.
    one_statement = True
