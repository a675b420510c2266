"""On MySQL and MariaDB, compare resources byte for byte.

Their default collations ignore case and accents, so ``job:42`` and ``JOB:42``
would be one unique key, and one lock. ``utf8mb4_bin`` (in MariaDB and MySQL 8
alike) keeps every distinct name distinct. Other databases compare bytes
already: there the migration does nothing. (``db_collation`` on the field
would name one collation for every database.)
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

BINARY_COLLATION = "utf8mb4_bin"

# (table, column) of every column that holds a resource name.
RESOURCE_COLUMNS = [
    ("distributed_locks", "resource"),
    ("distributed_lock_waiters", "resource"),
]


def binary_resource_collation(apps: Any, schema_editor: Any) -> None:
    connection = schema_editor.connection
    if connection.vendor != "mysql":
        return
    qn = connection.ops.quote_name
    for table, column in RESOURCE_COLUMNS:
        schema_editor.execute(
            f"ALTER TABLE {qn(table)} MODIFY {qn(column)} VARCHAR(255) "
            f"CHARACTER SET utf8mb4 COLLATE {BINARY_COLLATION} NOT NULL"
        )


class Migration(migrations.Migration):
    dependencies = [
        ("django_dlock", "0002_lock_waiters"),
    ]

    operations = [
        migrations.RunPython(
            binary_resource_collation, migrations.RunPython.noop, atomic=False, elidable=False
        ),
    ]
