"""gunicorn worker classes whose own refusals are application/problem+json.

gunicorn refuses some requests before Django sees them (a request line or header it cannot
parse, over-long request lines and headers, a transfer coding it does not support, broken
chunked framing), with a small HTML page, where docs/http-contract.md promises problem+json
to every client. These workers answer the same statuses as problem+json (`REFUSALS`), with
`Connection: close`, and log one warning line as gunicorn does; every other error is
gunicorn's own. `--worker-class idemdash.serving.ProblemThreadWorker` (gthread, the
Procfile's) or `idemdash.serving.ProblemSyncWorker`. Only gunicorn imports this module."""

from __future__ import annotations

from gunicorn import util
from gunicorn.http import errors
from gunicorn.workers.base import Worker
from gunicorn.workers.gthread import ThreadWorker
from gunicorn.workers.sync import SyncWorker

from idemdash.core.problems import CONTENT_TYPE as PROBLEM_CONTENT_TYPE
from idemdash.core.problems import problem_body

# (exception, status, reason, problem slug), the first match wins; the statuses are gunicorn's.
REFUSALS: tuple[tuple[type[Exception], int, str, str], ...] = (
    (errors.LimitRequestLine, 414, "URI Too Long", "uri-too-long"),
    (errors.LimitRequestHeaders, 431, "Request Header Fields Too Large", "header-fields-too-large"),
    (errors.UnsupportedTransferCoding, 501, "Not Implemented", "not-implemented"),
    (errors.ExpectationFailed, 417, "Expectation Failed", "malformed-request"),
    (errors.ForbiddenProxyRequest, 403, "Forbidden", "malformed-request"),
)
# The application's own bad response headers and gunicorn's configuration problems stay
# gunicorn's 500s: they are not the client's doing.
NOT_THE_CLIENTS = (errors.InvalidResponseHeader, errors.InvalidResponseHeaderName, errors.ConfigurationProblem)
DETAIL_LIMIT = 200


def refusal(exc: BaseException) -> tuple[int, str, bytes] | None:
    """(status, reason, problem+json body) for a request gunicorn refused, else None."""
    if not isinstance(exc, errors.ParseException) or isinstance(exc, NOT_THE_CLIENTS):
        return None
    status, reason, slug = 400, "Bad Request", "malformed-request"
    for kind, kind_status, kind_reason, kind_slug in REFUSALS:
        if isinstance(exc, kind):
            status, reason, slug = kind_status, kind_reason, kind_slug
            break
    detail = f"The server could not read the request ({type(exc).__name__}: {str(exc)[:DETAIL_LIMIT]})."
    return status, reason, problem_body(status, slug, reason, detail).encode()


class ProblemErrors(Worker):
    def handle_error(self, req, client, addr, exc):  # noqa: ANN001 - gunicorn's signature
        answer = refusal(exc)
        if answer is None:
            return super().handle_error(req, client, addr, exc)
        status, reason, body = answer
        self.log.warning("Invalid request from ip=%s: %s", (addr or ("",))[0], exc)
        head = (f"HTTP/1.1 {status} {reason}\r\nConnection: close\r\n"
                f"Content-Type: {PROBLEM_CONTENT_TYPE}\r\nContent-Length: {len(body)}\r\n\r\n")
        try:
            util.write_nonblock(client, head.encode("latin-1") + body)
        except Exception:  # noqa: BLE001 - the client may be gone; gunicorn does the same
            self.log.debug("Failed to send error message.")
        return None


class ProblemSyncWorker(ProblemErrors, SyncWorker):
    pass


class ProblemThreadWorker(ProblemErrors, ThreadWorker):
    pass
