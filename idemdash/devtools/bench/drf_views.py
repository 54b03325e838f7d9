"""The DRF view that scenario 8 compares: unprotected, under idemdash, under drf-idempotency.

The same APIView each time, without authentication, so that only the layer differs. Each sits
where it works: idemdash's on the handler (docs/http-contract.md: Each kind of view);
drf-idempotency's around `as_view()`, as below it (its documented `@api_view` order) it renders
a Response DRF has not finalized and answers 500, then 409 to every retry."""

from __future__ import annotations

import importlib.util

from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from idemdash.devtools.bench.models import BenchRow
from receipts import drf

SCOPE = "bench-drf"


class Insert(APIView):
    authentication_classes: list = []
    permission_classes = [AllowAny]

    def post(self, request: Request) -> Response:
        row = BenchRow.objects.create(label=str(request.data.get("n", ""))[:64])
        return Response({"id": row.pk}, status=201)


class InsertUnderIdemdash(Insert):
    @drf.idempotent("bench.drf", scope=lambda request: SCOPE)  # one scope: the bench deletes it between runs
    def post(self, request: Request) -> Response:
        return super().post(request)


unprotected = Insert.as_view()
under_idemdash = InsertUnderIdemdash.as_view()
under_drf_idempotency = None
if importlib.util.find_spec("drf_idempotency") is not None:
    from drf_idempotency import idempotent as drf_idempotency_idempotent

    under_drf_idempotency = drf_idempotency_idempotent()(Insert.as_view())
