"""idemdash/core/attempts.py: will another attempt help? The rule in Python and in SQL."""

from __future__ import annotations

import pytest
from django.utils import timezone

from idemdash.core.attempts import lasting_status, lasting_status_q
from receipts.outbox.models import OutboxMessage


def test_only_a_4xx_other_than_408_409_425_and_429_is_lasting():
    assert [code for code in range(100, 600) if lasting_status(code)] == [
        code for code in range(400, 500) if code not in (408, 409, 425, 429)
    ]
    assert lasting_status(None) is False


@pytest.mark.django_db
def test_the_sql_filter_picks_exactly_the_codes_the_python_rule_calls_lasting():
    now = timezone.now()
    codes = [None, *range(100, 600)]
    OutboxMessage.objects.bulk_create(
        OutboxMessage(key=f"k{code}", action="http.post", fingerprint="f", last_status_code=code,
                      next_attempt_at=now, created_at=now, updated_at=now)
        for code in codes
    )
    picked = set(OutboxMessage.objects.filter(lasting_status_q("last_status_code")).values_list("last_status_code", flat=True))
    assert picked == {code for code in codes if lasting_status(code)}
