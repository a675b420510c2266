from __future__ import annotations

from django.db import models


class Counter(models.Model):
    """A shared number that processes increment inside the lock."""

    name = models.CharField(max_length=100, unique=True)
    value = models.IntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.name}={self.value}"
