from django.db import transaction
from rest_framework import mixins, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from orders.models import Note, Order
from orders.serializers import OrderSerializer
from receipts import drf
from receipts.outbox.store import enqueue


class OrderViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    serializer_class = OrderSerializer

    def get_queryset(self):
        return Order.objects.filter(owner=self.request.user).order_by("id")

    @drf.idempotent("orders.create")
    def create(self, request):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        with transaction.atomic():
            order = serializer.save(owner=request.user)
            # Shipping and the confirmation go out once the order is committed, by the worker.
            enqueue("shop.ship", {"order": order.pk}, f"order-{order.pk}-ship")
            enqueue("email.send", {"to": [request.user.email], "subject": f"Order {order.pk}",
                                   "body": "Thank you for your order."}, f"order-{order.pk}-mail")
        return Response(serializer.data, status=201)

    @action(detail=True, methods=["post"])
    def reorder(self, request, pk=None):
        # No key: a retried reorder places another order.
        order = self.get_object()
        again = Order.objects.create(owner=request.user, sku=order.sku, quantity=request.data.get("quantity", 1))
        return Response(self.get_serializer(again).data, status=201)

    @action(detail=True, methods=["post"])
    @drf.idempotent("orders.note")
    def notes(self, request, pk=None):
        note = Note.objects.create(order=self.get_object(), text=request.data["text"])
        return Response({"id": note.pk, "text": note.text}, status=201)
