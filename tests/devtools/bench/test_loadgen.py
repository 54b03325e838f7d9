from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from idemdash.devtools.bench import loadgen


def test_percentiles_are_nearest_rank_in_milliseconds():
    latencies = [i / 1000 for i in range(1, 101)]  # 1..100 ms
    assert loadgen.percentile_ms(latencies, 50) == pytest.approx(50)
    assert loadgen.percentile_ms(latencies, 99) == pytest.approx(99)
    assert loadgen.percentile_ms(latencies, 100) == pytest.approx(100)
    assert loadgen.percentile_ms([], 99) == 0.0


def test_compare_alternates_the_order_of_variants_every_round():
    order = []
    comparison = loadgen.compare(
        {"a": lambda r: order.append("a") or loadgen.LoadResult("a"),
         "b": lambda r: order.append("b") or loadgen.LoadResult("b")},
        rounds=4,
    )
    assert order == ["a", "b", "b", "a", "a", "b", "b", "a"]
    assert len(comparison.rounds) == 4


def test_ratios_are_medians_of_per_round_ratios():
    def result(count: int, elapsed: float) -> loadgen.LoadResult:
        return loadgen.LoadResult("x", latencies=[0.001] * count, elapsed=elapsed)

    comparison = loadgen.Comparison(rounds=[
        {"a": result(80, 1), "b": result(100, 1)},
        {"a": result(40, 1), "b": result(50, 1)},  # a noisy round: both slow, same ratio
        {"a": result(90, 1), "b": result(100, 1)},
    ])
    assert comparison.ratio("a", "b") == pytest.approx(0.8)
    assert comparison.median("b", "throughput") == pytest.approx(100)


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        status = 500 if self.path.endswith("/7") else 200
        self.send_response(status)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_a_load_stops_at_its_request_budget_and_counts_failures(server):
    result = loadgen.run_load("t", server, lambda c, n: c.post(f"/r/{n}", content=b"x"),
                              clients=4, max_requests=50, time_limit=30)
    assert result.count == 49
    assert result.errors == 1  # /r/7 answered 500
    assert result.statuses == {200: 49, 500: 1}
    assert result.throughput > 0


def test_a_load_stops_at_its_time_limit(server):
    result = loadgen.run_load("t", server, lambda c, n: c.post("/r", content=b"x"),
                              clients=2, max_requests=10**9, time_limit=0.5)
    assert 0 < result.count < 10**9
    assert result.elapsed < 5
