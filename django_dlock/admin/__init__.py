"""The admin of the locks (``LockAdmin``) and of the throttle keys
(``ThrottleKeyAdmin``), registered on import, as Django's
``admin.autodiscover()`` does; and ``EditLockMixin``, edit-locks for a
project's own ``ModelAdmin``."""

from __future__ import annotations

from django_dlock.admin.edit_locks import EditLockMixin
from django_dlock.admin.locks import LockAdmin
from django_dlock.admin.status import StatusFilter
from django_dlock.admin.throttles import ThrottleKeyAdmin

# Where they lived before django_dlock.humanize.
from django_dlock.humanize import duration_in_words, time_left_in_words

__all__ = [
    "EditLockMixin",
    "LockAdmin",
    "StatusFilter",
    "ThrottleKeyAdmin",
    "duration_in_words",
    "time_left_in_words",
]
