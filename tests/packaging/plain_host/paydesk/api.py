from ninja import NinjaAPI

from payments.api import router as payments_router

api = NinjaAPI(title="Paydesk")
api.add_router("/payments/", payments_router)
