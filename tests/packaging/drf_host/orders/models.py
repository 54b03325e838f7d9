from django.conf import settings
from django.db import models


class Order(models.Model):
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="orders")
    sku = models.CharField(max_length=50)
    quantity = models.PositiveIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)
