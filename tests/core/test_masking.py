"""idemdash.core.masking: secrets masked by kind (URL userinfo, credential headers), for
pages, the admin and log lines."""

from __future__ import annotations

import logging

import pytest
from django.core.exceptions import ImproperlyConfigured
from hypothesis import given
from hypothesis import strategies as st

from idemdash.core.masking import MASK, MaskingFilter, mask_text, masked


@pytest.mark.parametrize("text, shown", [
    ("https://alice:pw@example.com/x", f"https://{MASK}@example.com/x"),
    ("POST http://token@10.0.0.1:8080/in \"HTTP/1.1 200 OK\"", f"POST http://{MASK}@10.0.0.1:8080/in \"HTTP/1.1 200 OK\""),
    ("two: https://a:b@x.io and ftp://c:d@y.io/f", f"two: https://{MASK}@x.io and ftp://{MASK}@y.io/f"),
    ("postgres://postgres:hunter2@db:5432/app", f"postgres://{MASK}@db:5432/app"),
    ("mail ops@example.com, no URL", "mail ops@example.com, no URL"),
    ("https://example.com/path@v2?q=a@b", "https://example.com/path@v2?q=a@b"),  # no userinfo: unchanged
    ("no secrets here", "no secrets here"),
])
def test_url_userinfo_is_masked_wherever_a_url_appears_in_text(text, shown):
    assert mask_text(text) == shown


@given(user=st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters="/?#@"), min_size=1),
       host=st.from_regex(r"[a-z]{1,10}\.[a-z]{2,5}", fullmatch=True))
def test_no_userinfo_survives_masking(user, host):
    masked_url = mask_text(f"https://{user}@{host}/p")
    assert masked_url == f"https://{MASK}@{host}/p"


def test_credential_headers_are_masked_by_name_and_the_rest_shown():
    payload = {"url": "https://u:p@h.io/", "headers": {"Authorization": "Bearer x", "X-Api-Key": "k", "X-Auth-User": "u",
                                                       "Cookie": "c", "X-Trace": "t", "X-Link": "https://u:p@h.io/"}}
    shown = masked(payload)
    assert shown["url"] == f"https://{MASK}@h.io/"
    assert shown["headers"] == {"Authorization": MASK, "X-Api-Key": MASK, "X-Auth-User": MASK, "Cookie": MASK,
                                "X-Trace": "t", "X-Link": f"https://{MASK}@h.io/"}
    assert payload["headers"]["Authorization"] == "Bearer x"  # the stored value is untouched


def test_the_masked_header_names_are_a_setting(settings):
    settings.RECEIPTS_MASKED_HEADERS = ["x-tenant"]
    assert masked({"headers": {"X-Tenant-Id": "t", "Authorization": "a"}})["headers"] == {"X-Tenant-Id": MASK,
                                                                                          "Authorization": "a"}
    settings.RECEIPTS_MASKED_HEADERS = "x-tenant"
    with pytest.raises(ImproperlyConfigured):
        masked({"headers": {}})


def test_nested_values_are_masked_at_any_depth():
    value = {"a": [{"b": "see https://x:y@h.io"}], "headers": {"token": "t"}}
    assert masked(value) == {"a": [{"b": f"see https://{MASK}@h.io"}], "headers": {"token": MASK}}


def test_the_logging_filter_masks_the_formatted_message():
    record = logging.LogRecord("httpx", logging.INFO, __file__, 1, 'HTTP Request: %s %s "%s"',
                               ("POST", "http://alice:pw@127.0.0.1/in", "HTTP/1.1 200 OK"), None)
    assert MaskingFilter().filter(record)
    assert record.getMessage() == f'HTTP Request: POST http://{MASK}@127.0.0.1/in "HTTP/1.1 200 OK"'


def test_the_projects_log_handler_masks_every_logger():
    from django.conf import settings

    assert "mask" in settings.LOGGING["handlers"]["console"]["filters"]
    handler = next(h for h in logging.getLogger().handlers if any(isinstance(f, MaskingFilter) for f in h.filters))
    record = logging.LogRecord("anything.at.all", logging.WARNING, __file__, 1, "connecting to %s",
                               ("redis://:pw@127.0.0.1:6379/0",), None)
    assert handler.filter(record)
    assert record.getMessage() == f"connecting to redis://{MASK}@127.0.0.1:6379/0"
