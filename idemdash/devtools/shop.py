"""The demo shop's write route that nothing protects, on purpose: a refund a client retries
is refunded twice, and the observer of unprotected routes (receipts/observe.py) counts the
retry as a would-be duplicate, which the overview and the Coverage page show (docs/demo.md)."""

from __future__ import annotations

import secrets

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST


@csrf_exempt  # called by the simulator, a client without a session
@require_POST
def refund(request: HttpRequest) -> JsonResponse:
    """Refund an order: every call makes a new refund, the way a view without a key does."""
    return JsonResponse({"refund": f"re_{secrets.token_hex(6)}", "status": "refunded"}, status=201)
