from ninja import Router, Schema

from receipts.ninja import idempotent

router = Router(tags=["payments"])


class TransferIn(Schema):
    amount: int
    to: str


class TransferOut(Schema):
    amount: int
    to: str


@router.get("/balance")
def balance(request):
    return {"balance": 0}


@router.post("/transfers", response={201: TransferOut})
@idempotent("transfers.create")
def create_transfer(request, payload: TransferIn):
    return 201, payload


@router.post("/transfers/{transfer_id}/reverse")
def reverse_transfer(request, transfer_id: int, payload: TransferIn):
    return {"reversed": transfer_id, "amount": payload.amount}
