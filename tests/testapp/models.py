from __future__ import annotations

from django.db import models


class Counter(models.Model):
    """A shared number that processes increment inside the lock."""

    name = models.CharField(max_length=100, unique=True)
    value = models.IntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.name}={self.value}"


class Product(models.Model):
    """The model of docs/recipes.md's stock recipe, whose code runs against it."""

    sku = models.CharField(max_length=64, unique=True)
    stock = models.PositiveIntegerField()
    fencing_token = models.PositiveBigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.sku}: {self.stock}"
