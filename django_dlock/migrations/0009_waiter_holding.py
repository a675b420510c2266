"""Who waits for whom (issue 36, item 4): what a waiter's thread or task holds
while it waits, so that a waiter can find a cycle of waiters each holding what
the next waits for. Defaults to "" (holds nothing) in the database too:
processes of the previous version keep queuing meanwhile."""

from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_dlock", "0008_lock_delay"),
    ]

    operations = [
        migrations.AddField(
            model_name="lockwaiter",
            name="holding",
            field=models.TextField(blank=True, db_default="", default="", verbose_name="holding"),
        ),
    ]
