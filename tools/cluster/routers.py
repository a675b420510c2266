"""A database router as many projects have one: reads go to the replica."""

from __future__ import annotations

from typing import Any


class ReadsToReplica:
    def db_for_read(self, model: type[Any], **hints: Any) -> str:
        return "replica"

    def db_for_write(self, model: type[Any], **hints: Any) -> str:
        return "default"

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool:
        return True

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool:
        return db == "default"
