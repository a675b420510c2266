"""Lock-delay (``lock(..., lock_delay=...)``): the exclusive holder's delay,
kept on the resource's row after an involuntary loss. Nullable, with no
default to write: adding it rewrites no row, and processes of the previous
version keep taking and releasing locks meanwhile (they write no delay)."""

from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_dlock", "0007_throttle_slots"),
    ]

    operations = [
        migrations.AddField(
            model_name="distributedlock",
            name="lock_delay",
            field=models.DurationField(blank=True, null=True, verbose_name="lock delay"),
        ),
    ]
