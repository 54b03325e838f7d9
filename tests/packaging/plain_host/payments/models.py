from django.db import models


class Payment(models.Model):
    """Money the paydesk moved: a capture, a payout, a charge or a transfer."""

    kind = models.CharField(max_length=20)
    amount = models.PositiveIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)
