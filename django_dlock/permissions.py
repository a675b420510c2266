"""Who may see owners: one rule for the HTTP API and the admin.

An owner token is a secret: knowing it is the right to renew and release its
lock. So only those who may release any lock anyway (force-release, the
model's "change" permission) see owners.
"""

from __future__ import annotations

from typing import Any

SEE_OWNERS_PERMISSION = "django_dlock.change_distributedlock"


def may_see_owners(user: Any) -> bool:
    """Whether ``user`` (a Django user, or ``AnonymousUser``) is shown owners."""
    return bool(user.has_perm(SEE_OWNERS_PERMISSION))
