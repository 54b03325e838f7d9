"""Async views behind @idempotent under a real ASGI server: uvicorn with three worker processes
(tests/uvicorn.py) serving tests/receipts/view_kinds_urls.py against the test database, called
over HTTP by many threads in several OS processes at once. Exactly one effect per key is
counted in the database; a lease taken over while the view runs rolls the view's writes back.

PostgreSQL: three processes writing at once is what the claim's atomicity is about, and a lease
is only ever taken over there (on SQLite a view's transaction holds the one write lock while it
runs, so nothing can take its key over: receipts/store.py:kept)."""

from __future__ import annotations

import socket
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from django.utils import timezone

from receipts.models import Attempt, Receipt
from tests.concurrently import in_forked_processes
from tests.receipts.test_decorators import rows
from tests.receipts.view_kinds_urls import release_hold
from tests.uvicorn import Uvicorn
from tests.waits import until

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

BODY = b'{"amount": 5}'


@pytest.fixture(scope="module")
def uvicorn(django_db_setup, django_db_blocker, tmp_path_factory):
    with django_db_blocker.unblock():
        server = Uvicorn(tmp_path_factory.mktemp("uvicorn") / "uvicorn.log", "tests.receipts.asgi_settings", workers=3)
    yield server
    server.stop()


def post(url: str, key: str, **headers: str) -> httpx.Response:
    headers = {"Idempotency-Key": key, "Content-Type": "application/json", **headers}
    return httpx.post(url, content=BODY, headers=headers, timeout=60)


def _callers(base: str, paths: list[str], keys: list[str], threads: int, go, queue) -> None:
    """One OS process of callers: `threads` threads, each calling every key on every path."""
    go.wait(30)
    lock = threading.Lock()
    seen: list[tuple[str, str, int, bool, bytes]] = []

    def call(_: int) -> None:
        for path in paths:
            for key in keys:
                reply = post(base + path + "?sleep=0.2", f"{path}:{key}")
                with lock:
                    seen.append((path, key, reply.status_code, reply.headers.get("Idempotent-Replayed") == "true",
                                 reply.content))

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(call, range(threads)))
    queue.put(seen)


def test_many_callers_in_several_processes_run_each_async_view_once_per_key(uvicorn):
    paths, keys = ["/async-function", "/async-cbv-post"], [f"k-{i}" for i in range(6)]
    processes, threads = 3, 4
    seen = in_forked_processes(_callers, [(uvicorn.url, paths, keys, threads)] * processes, timeout=150)
    assert len(seen) == processes * threads * len(paths) * len(keys)
    for path in paths:
        for key in keys:
            replies = [(status, replayed, body) for p, k, status, replayed, body in seen if (p, k) == (path, key)]
            assert rows(f"{path}:{key}") == 1, (path, key)
            ran = [body for status, replayed, body in replies if status == 201 and not replayed]
            assert len(ran) == 1, replies
            assert all(body == ran[0] for status, replayed, body in replies if replayed)
            assert {status for status, _, _ in replies} <= {201, 409}
    assert Receipt.objects.filter(status="completed").count() == len(paths) * len(keys)


def test_prefer_wait_waits_off_the_event_loop_and_replays_the_first_result(uvicorn):
    """Waiters hold threads, not the loop: while they wait, the same workers keep answering."""
    slow = uvicorn.url + "/async-function?hold=slow"  # runs until the test says go
    with ThreadPoolExecutor(8) as pool:
        first = pool.submit(post, slow, "slow")
        until(lambda: Receipt.objects.filter(key="slow").exists(), "the first claim")
        # Four: RECEIPTS_MAX_WAITERS per process, wherever they land.
        waiters = [pool.submit(post, slow, "slow", Prefer="wait=30") for _ in range(4)]
        until(lambda: Receipt.objects.filter(key="slow", waiters=True).exists(), "a waiter")
        others = [post(uvicorn.url + "/async-cbv-post", f"quick-{i}") for i in range(6)]
        assert [reply.status_code for reply in others] == [201] * 6
        # The workers answered while the waiters still waited for the first attempt.
        assert not first.done() and not any(waiter.done() for waiter in waiters)
        release_hold("slow")
        replies = [waiter.result() for waiter in waiters]
    assert first.result().status_code == 201
    for reply in replies:
        assert reply.status_code == 201 and reply.headers["Idempotent-Replayed"] == "true"
        assert reply.content == first.result().content and reply.headers["Preference-Applied"] == "wait=30"
    assert rows("slow") == 1


def test_a_lease_taken_over_while_the_async_view_runs_rolls_its_writes_back(uvicorn):
    with ThreadPoolExecutor(2) as pool:
        # Both views are held until the second attempt owns the key, however long that takes.
        held = uvicorn.url + "/async-function?hold=fenced"
        slow = pool.submit(post, held, "fenced")
        until(lambda: Receipt.objects.filter(key="fenced").exists(), "the first claim")  # it commits before the view
        # The lease lapses (a stalled worker, an operator's "take over"): the next attempt owns it.
        Receipt.objects.filter(key="fenced").update(lease_expires_at=timezone.now())
        next_one = pool.submit(post, held, "fenced")
        until(lambda: Receipt.objects.filter(key="fenced", fencing_token=2).exists(), "the second attempt's claim")
        release_hold("fenced")
        second = next_one.result()
        assert second.status_code == 201 and "Idempotent-Replayed" not in second.headers
        lost = slow.result()
    assert lost.status_code == 409 and lost.json()["type"] == "urn:idemdash:problem:lease-lost"
    assert rows("fenced") == 1  # the second attempt's; the first one's write was rolled back
    receipt = Receipt.objects.get(key="fenced")
    assert receipt.status == "completed" and receipt.fencing_token == 2
    assert Attempt.objects.filter(key="fenced", outcome="stale_token", fencing_token=1).exists()


def test_a_chunked_body_over_the_upload_limit_is_413_before_anything_runs(uvicorn):
    """uvicorn hands Django the whole de-chunked body with no Content-Length; without one Django
    applies no size limit, so ChunkedBodyMiddleware gives it its length."""
    parts = (b"x" * 65536 for _ in range(48))  # 3 MiB, over DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MiB)
    reply = httpx.post(uvicorn.url + "/async-function", content=parts, timeout=60,
                       headers={"Idempotency-Key": "big", "Content-Type": "application/octet-stream"})
    assert reply.status_code == 413 and reply.json()["type"] == "urn:idemdash:problem:payload-too-large"
    assert not Receipt.objects.filter(key="big").exists()
    small = httpx.post(uvicorn.url + "/async-function", content=(b"{}" for _ in range(1)), timeout=60,
                       headers={"Idempotency-Key": "small", "Content-Type": "application/json"})
    assert small.status_code == 201 and rows("small") == 1


def test_a_client_gone_mid_view_rolls_the_view_back_and_gives_the_key_back(uvicorn):
    port = int(uvicorn.url.rsplit(":", 1)[1])
    request = (
        "POST /async-function?hold=gone HTTP/1.1\r\nHost: 127.0.0.1\r\nIdempotency-Key: gone\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(BODY)}\r\n\r\n"
    ).encode() + BODY
    with socket.create_connection(("127.0.0.1", port), timeout=30) as client:
        client.sendall(request)
        until(lambda: Receipt.objects.filter(key="gone").exists(), "the claim")  # claimed: the view runs
    # The client hung up: Django cancels the view.
    until(lambda: Receipt.objects.filter(key="gone", released_at__isnull=False).exists(), "the key given back")
    assert rows("gone") == 0
    assert "CancelledError" in Receipt.objects.get(key="gone").release_reason
    release_hold("gone")  # the retry's view, under the same URL, runs through
    retry = post(uvicorn.url + "/async-function?hold=gone", "gone")
    assert retry.status_code == 201 and "Idempotent-Replayed" not in retry.headers
    assert rows("gone") == 1

