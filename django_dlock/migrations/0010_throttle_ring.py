"""Throttles in one statement (issue 46): a key's row (its slot 0) keeps the
times of its last uses (``ring``) and when its last decision refused one
(``refused_at``), instead of one row per use.

The existing uses are folded into each key's slot 0, oldest first (the rows
numbered 1 and up are deleted), so that every use still in its window counts
after the migration as before. ``ring`` defaults to "" in the database too.
Going back keeps slot 0 (the key's last use): the earlier uses are forgotten.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import migrations, models

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_WIDTH = 16  # rules.throttle.WIDTH, as of this migration


def _us(moment: datetime) -> int:
    if moment.tzinfo is None:  # USE_TZ = False: Django stores UTC
        moment = moment.replace(tzinfo=UTC)
    return (moment - _EPOCH) // timedelta(microseconds=1)


def fold_uses(apps: Any, schema_editor: Any) -> None:
    slots = apps.get_model("django_dlock", "ThrottleSlot").objects.using(
        schema_editor.connection.alias
    )
    # (order_by(): the model's ordering would make distinct() see (key, slot) pairs.)
    keys = slots.filter(slot__gt=0).order_by().values_list("key", flat=True).distinct()
    for key in sorted(set(keys)):
        rows = list(slots.filter(key=key, used_at__isnull=False).order_by("used_at"))
        last = rows[-1] if rows else None
        ring = "".join(str(_us(row.used_at)).rjust(_WIDTH, "0") for row in rows)
        fields = {"ring": ring}
        if last is not None:
            fields.update(used_at=last.used_at, free_at=last.free_at, rate=last.rate)
        if not slots.filter(key=key, slot=0).update(**fields):
            slots.create(key=key, slot=0, **fields)
        slots.filter(key=key, slot__gt=0).delete()
    # A key with its slot 0 alone: its one use, if any.
    for row in slots.filter(slot=0, ring="", used_at__isnull=False).iterator():
        row.ring = str(_us(row.used_at)).rjust(_WIDTH, "0")
        row.save(update_fields=["ring"])


class Migration(migrations.Migration):
    dependencies = [
        ("django_dlock", "0009_waiter_holding"),
    ]

    operations = [
        migrations.AddField(
            model_name="throttleslot",
            name="refused_at",
            field=models.DateTimeField(blank=True, null=True, verbose_name="refused at"),
        ),
        migrations.AddField(
            model_name="throttleslot",
            name="ring",
            field=models.TextField(blank=True, db_default="", default="", verbose_name="uses kept"),
        ),
        migrations.RunPython(fold_uses, migrations.RunPython.noop, elidable=True),
    ]
