"""idemdash.serving: which of gunicorn's refusals become which problem (the wire behaviour,
over a socket to a real gunicorn, is tests/faults/test_hostile_wire.py)."""

from __future__ import annotations

import json

import pytest
from gunicorn.http import errors

from idemdash.serving import ProblemSyncWorker, ProblemThreadWorker, refusal


@pytest.mark.parametrize("exc, status, slug", [
    (errors.InvalidHeaderName("Bad Header"), 400, "malformed-request"),
    (errors.InvalidRequestLine("HELLO"), 400, "malformed-request"),
    (errors.InvalidChunkSize(b"zz"), 400, "malformed-request"),
    (errors.ObsoleteFolding("X-A"), 400, "malformed-request"),
    (errors.LimitRequestLine(5000, 4094), 414, "uri-too-long"),
    (errors.LimitRequestHeaders("too many"), 431, "header-fields-too-large"),
    (errors.UnsupportedTransferCoding("br"), 501, "not-implemented"),
])
def test_a_request_gunicorn_refuses_becomes_its_problem(exc, status, slug):
    got, _, body = refusal(exc)
    problem = json.loads(body)
    assert (got, problem["status"], problem["type"]) == (status, status, f"urn:idemdash:problem:{slug}")
    assert type(exc).__name__ in problem["detail"]


@pytest.mark.parametrize("exc", [
    errors.InvalidResponseHeaderName("X Y"),  # the application's fault: gunicorn's 500
    errors.ConfigurationProblem("bad"),
    RuntimeError("a bug"),
    OSError("reset"),
])
def test_every_other_error_stays_gunicorns_own(exc):
    assert refusal(exc) is None


def test_both_worker_kinds_answer_with_problems():
    assert ProblemSyncWorker.handle_error is ProblemThreadWorker.handle_error
