from django.conf import settings
from django.db import models


class Order(models.Model):
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="orders")
    sku = models.CharField(max_length=50)
    quantity = models.PositiveIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)


class Note(models.Model):
    """What the customer tells the shop about an order (where to leave it)."""

    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="notes")
    text = models.CharField(max_length=500)
    created_at = models.DateTimeField(auto_now_add=True)
