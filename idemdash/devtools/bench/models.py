from __future__ import annotations

from django.db import models


class BenchRow(models.Model):
    """The one row that the bare and the protected bench views insert: the side effect."""

    label = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.label
