from __future__ import annotations

import pytest

from receipts.operator_actions import AMBIGUOUS_ERROR, unknown_outcome
from tests.dashboard.build import completed, failed, stuck

pytestmark = pytest.mark.django_db

# Errors as the decorator and run_once store them ("Type: message"), from the libraries
# a step sends with: the request may have gone out and no answer came back.
AMBIGUOUS = [
    "ReadTimeout: The read operation timed out",  # httpx
    "requests.exceptions.ConnectionError: ('Connection aborted.', RemoteDisconnected('Remote end closed connection'))",
    "TimeoutError: card processor timed out",
    "ConnectionResetError: [Errno 104] Connection reset by peer",
    "SMTPServerDisconnected: Connection unexpectedly closed",
    "ServerDisconnectedError: Server disconnected",  # aiohttp
    "BrokenPipeError: [Errno 32] Broken pipe",
    "SSLError: EOF occurred in violation of protocol",
    "HTTP 504",
]
# The provider answered: nothing is unknown about these.
KNOWN = ["card_declined", "ValueError: amount must be positive", "HTTP 402", "HTTP 500", "IntegrityError: duplicate key"]


@pytest.mark.parametrize("error", AMBIGUOUS)
def test_an_error_that_leaves_the_effect_unknown_is_recognised(error):
    assert AMBIGUOUS_ERROR.search(error)


@pytest.mark.parametrize("error", KNOWN)
def test_an_answer_from_the_provider_is_not_taken_for_an_unknown_outcome(error):
    assert not AMBIGUOUS_ERROR.search(error)


def test_only_a_failure_that_may_have_had_its_effect_is_an_unknown_outcome():
    assert unknown_outcome(failed("t", error="ReadTimeout: timed out")) == "failed with ReadTimeout after the request may have gone out"
    assert unknown_outcome(failed("d")) == ""
    assert unknown_outcome(completed("c")) == ""
    assert unknown_outcome(stuck("s")).startswith("has not settled")


def test_caller_text_in_the_error_is_never_repeated_only_a_plain_exception_name():
    r = failed("x", error="\u202eTimeoutError: <b>timed out</b>")
    assert unknown_outcome(r) == "failed with an error after the request may have gone out"
