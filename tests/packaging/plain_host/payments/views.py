import json

from django.http import JsonResponse
from django.utils.decorators import method_decorator
from django.views import View
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from payments.models import Payment
from receipts.decorators import idempotent


@require_GET
def payment_list(request):
    return JsonResponse({"payments": []})


@csrf_exempt  # an API endpoint behind the gateway, not a browser form
@require_POST
@idempotent("payments.capture")
def capture(request):
    payment = Payment.objects.create(kind="capture", amount=json.loads(request.body)["amount"])
    return JsonResponse({"payment": payment.pk, "captured": payment.amount}, status=201)


@csrf_exempt
@require_POST
def refund(request, pk):
    # No key: a retried refund refunds again.
    return JsonResponse({"payment": pk, "refunded": json.loads(request.body)["amount"]})


@method_decorator(csrf_exempt, name="dispatch")
@method_decorator(idempotent("payouts.create"), name="post")
class PayoutView(View):
    def get(self, request):
        return JsonResponse({"payouts": []})

    def post(self, request):
        payment = Payment.objects.create(kind="payout", amount=json.loads(request.body)["amount"])
        return JsonResponse({"payment": payment.pk, "paid_out": payment.amount}, status=201)


class StatusView(View):
    def get(self, request):
        return JsonResponse({"status": "ok"})


@csrf_exempt
@require_POST
@idempotent("charges.create")
async def create_charge(request):
    payment = await Payment.objects.acreate(kind="charge", amount=json.loads(request.body)["amount"])
    return JsonResponse({"payment": payment.pk, "charged": payment.amount}, status=201)


@csrf_exempt
@require_POST
async def void_charge(request, pk):
    return JsonResponse({"charge": pk, "voided": json.loads(request.body)["reason"]})


@require_GET
async def charge_detail(request, pk):
    return JsonResponse({"charge": pk})
