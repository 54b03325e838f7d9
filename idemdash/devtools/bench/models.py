from __future__ import annotations

from django.db import models


class BenchRow(models.Model):
    """The one row that the bare and the protected bench views insert: the side effect."""

    label = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        # Named, not found from the module: where the bench app is not installed (the suite,
        # which imports the bench's runner in process) the model would otherwise be filed under
        # the devtools app, whose migrations then lack it (makemigrations --check failed).
        app_label = "bench"

    def __str__(self) -> str:
        return self.label
