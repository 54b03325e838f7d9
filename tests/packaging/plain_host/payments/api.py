from ninja import Router, Schema

from payments.models import Payment
from receipts.ninja import idempotent

router = Router(tags=["payments"])


class TransferIn(Schema):
    amount: int
    to: str


class TransferOut(Schema):
    payment: int
    amount: int
    to: str


@router.get("/balance")
def balance(request):
    return {"balance": 0}


@router.post("/transfers", response={201: TransferOut})
@idempotent("transfers.create")
def create_transfer(request, payload: TransferIn):
    payment = Payment.objects.create(kind="transfer", amount=payload.amount)
    return 201, {"payment": payment.pk, "amount": payment.amount, "to": payload.to}


@router.post("/transfers/{transfer_id}/reverse")
def reverse_transfer(request, transfer_id: int, payload: TransferIn):
    return {"reversed": transfer_id, "amount": payload.amount}
