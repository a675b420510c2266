"""What MariaDB's (and MySQL's) lock backend can do."""

from __future__ import annotations

from django_dlock.backends.features import BackendFeatures


class MySQLFeatures(BackendFeatures):
    # The exclusive lock's acquisition and release are one UPDATE each
    # (``mysql.one_row``).
    one_statement = True

    # A release opens the resource's gate, a named lock its holder held, on
    # which the head of the queue blocks (``mysql.wake``).
    waits_for_release = True
