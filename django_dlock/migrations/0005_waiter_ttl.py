from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_dlock", "0004_waiter_channel"),
    ]

    operations = [
        migrations.AddField(
            model_name="lockwaiter",
            name="ttl",
            field=models.DurationField(blank=True, null=True, verbose_name="ttl"),
        ),
    ]
