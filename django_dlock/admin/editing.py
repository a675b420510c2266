"""The edit-lock of one object of the admin for one user (``EditLockMixin``):
its name, its owner, and the lock operations the change page needs, each
through ``DistributedLock.objects`` (the operation layer)."""

from __future__ import annotations

import unicodedata
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser
from django.db import router
from django.db.models import Model
from django.db.models.options import Options
from django.utils.crypto import salted_hmac
from django.utils.formats import date_format
from django.utils.timezone import localtime
from django.utils.translation import gettext

from django_dlock.conf import conf
from django_dlock.exceptions import InvalidArgument
from django_dlock.humanize import duration_in_words
from django_dlock.models import DistributedLock
from django_dlock.rules import Hold
from django_dlock.rules.clock import database_now
from django_dlock.validators import MAX_LENGTH, validate_label

PREFIX = "admin-edit:"


def owner_for(user: AbstractBaseUser | AnonymousUser) -> str:
    """The owner token of ``user``'s edit-locks: derived from the user, so that
    each request of theirs can renew and release, and keyed with SECRET_KEY, so
    that nobody can tell it from the user's id and release it elsewhere."""
    return salted_hmac("django_dlock.admin.edit-lock", str(user.pk), algorithm="sha256").hexdigest()


def label_for(user: AbstractBaseUser | AnonymousUser) -> str:
    """What others see of ``user`` as the holder: their full name, else their user name."""
    names: list[Any] = [getattr(user, "get_full_name", lambda: "")(), user.get_username()]
    for name in names:
        label = unicodedata.normalize("NFC", str(name).strip())[:MAX_LENGTH]
        try:
            if label:
                return validate_label(label)
        except InvalidArgument:  # a name with characters a label refuses
            continue
    return f"user {user.pk}"


@dataclass(frozen=True)
class Editor:
    """Who holds an edit-lock, as others see them."""

    label: str
    since: datetime
    mine: bool = False  # the same user, from another page

    def describe(self) -> dict[str, str]:
        """The holder's label, since when (local time), and for how long, for messages."""
        since = localtime(self.since)
        seconds = (database_now(conf.DATABASE) - self.since).total_seconds()
        return {
            "label": self.label,
            "since": date_format(since, "DATETIME_FORMAT"),
            "time": date_format(since, "TIME_FORMAT"),
            "duration": duration_in_words(max(seconds, 0)),
        }


class EditLock:
    """The lock ``admin-edit:<app_label>.<model_name>:<pk>`` held for ``user``.

    A page that holds it carries the fencing token it was given: a later
    holder (a take-over, or the same user again after the lock was lost) gets
    a larger one, so a page that lost the lock cannot save even where its
    user holds the lock again from another page.
    """

    def __init__(self, obj: Model, user: AbstractBaseUser | AnonymousUser) -> None:
        opts: Options[Any] = obj._meta
        # Percent-encoded: a primary key may have characters a resource refuses.
        pk = quote(str(obj.pk), safe="")
        self.resource = f"{PREFIX}{opts.app_label}.{opts.model_name}:{pk}"
        self.owner = owner_for(user)
        self.label = label_for(user)

    def take(self) -> int | None:
        """Acquire it (or keep it, if this user holds it already): its fencing
        token, or None when another user holds it."""
        hold = DistributedLock.objects.acquire(
            self.resource, self.owner, conf.ADMIN_EDIT_TTL, label=self.label
        )
        return None if hold is None else hold.fencing_token

    def holder(self) -> Editor | None:
        """Who holds it now, if anyone."""
        for hold in DistributedLock.objects.holders(self.resource):
            label = hold.label or gettext("another user")
            return Editor(label, hold.acquired_at, mine=hold.owner == self.owner)
        return None

    def keep(self, token: int) -> Hold | None:
        """Renew it for another ttl if this user still holds it under ``token``:
        the renewed hold, or None."""
        try:
            hold = DistributedLock.objects.renew(self.resource, self.owner, conf.ADMIN_EDIT_TTL)
        except DistributedLock.DoesNotExist:
            return None
        return hold if hold is not None and hold.fencing_token == token else None

    def guard(self, hold: Hold, model: type[Model]) -> AbstractContextManager[object]:
        """The save's transaction, proven under ``hold`` (``held.atomic()``): its
        first statement checks the lock and keeps its row until the save commits,
        so no take-over lands in between. Where ``model`` lives in another
        database than the locks, nothing can be proven: the lock was checked just
        before (``keep``), and that is all."""
        if not isinstance(hold, DistributedLock):  # an edit-lock is exclusive: never so
            return nullcontext()
        try:
            return hold.atomic(using=router.db_for_write(model))
        except InvalidArgument:
            return nullcontext()

    def give_up(self, token: int) -> bool:
        """Release it if this user holds it under ``token`` (not a lock that the
        same user took again from another page)."""
        holds = DistributedLock.objects.holders(self.resource)
        if not any(h.owner == self.owner and h.fencing_token == token for h in holds):
            return False
        DistributedLock.objects.release(self.resource, self.owner)
        return True

    def take_over(self) -> int | None:
        """Take it from whoever holds it: a forced release, then an acquisition
        (None if a third user came in between)."""
        DistributedLock.objects.force_release(self.resource)
        return self.take()


def token_of(value: object) -> int | None:
    """The fencing token a page sent back, or None when it sent none that reads."""
    if isinstance(value, str) and value.isdigit() and len(value) < 20:
        return int(value)
    return None
