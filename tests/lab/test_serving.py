"""The Tornado inference server: every variant starts, answers and stops, and the memory and grad
facts per request differ as the variant says they must."""
import threading
import urllib.request

import pytest

from nogradlab import serving

N = 4


@pytest.fixture(scope="module")
def results():
    return serving.compare(serving.VARIANTS, n=N)


def _server_threads():
    return [t for t in threading.enumerate() if t.name.startswith(("tornado-", "model-worker"))]


def test_start_answer_stop():
    srv = serving.InferenceServer("no_grad")
    srv.start()
    try:
        assert srv.running and srv.port > 0 and srv.url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(srv.url, timeout=10) as resp:
            assert resp.status == 200
    finally:
        srv.stop()
    assert not srv.running
    srv.stop()  # twice is fine
    with pytest.raises(OSError):
        urllib.request.urlopen(srv.url, timeout=2)
    assert _server_threads() == []


@pytest.mark.parametrize("variant", serving.VARIANTS)
def test_each_variant_answers_every_request(results, variant):
    r = results[variant]
    assert [a["index"] for a in r.requests] == list(range(N))
    assert all(len(a["prediction"]) > 0 and a["latency_s"] > 0 for a in r.requests)
    assert r.memory_method == "storage"
    assert r.to_frame().shape[0] == N
    assert r.to_dict()["summary"]["requests"] == N
    assert _server_threads() == []


def test_no_grad_saves_nothing(results):
    for v in ("no_grad", "thread_pool_fixed"):
        s = results[v].summary()
        assert s["saved_bytes_per_request"] == 0
        assert s["outputs_requiring_grad"] == 0
        assert s["held_bytes_after_last"] == 0
        assert not any(a["grad_enabled"] for a in results[v].requests)


def test_grad_saves_activations(results):
    g, ng = results["grad"].summary(), results["no_grad"].summary()
    assert g["saved_bytes_per_request"] > 0
    assert g["outputs_requiring_grad"] == N
    # the output's graph is alive when the call returns, but dropped after the response
    assert g["retained_bytes_per_request"] > ng["retained_bytes_per_request"]
    assert g["held_bytes_after_last"] == 0


def test_keep_outputs_holds_more_with_every_request(results):
    r = results["keep_outputs"]
    held = [a["held_bytes"] for a in r.requests]
    assert all(b > a for a, b in zip(held, held[1:]))
    per = r.requests[0]["retained_bytes"]
    assert held == [per * (i + 1) for i in range(N)]
    assert [a["kept_outputs"] for a in r.requests] == list(range(1, N + 1))


def test_thread_pool_worker_tracks_gradients(results):
    r = results["thread_pool"]
    assert all(a["thread"].startswith("model-worker") for a in r.requests)
    assert all(a["grad_enabled"] and a["requires_grad"] for a in r.requests)
    assert r.summary()["saved_bytes_per_request"] == results["grad"].summary()["saved_bytes_per_request"]
    fixed = results["thread_pool_fixed"]
    assert all(a["thread"].startswith("model-worker") for a in fixed.requests)


def test_bad_arguments_raise_before_starting():
    with pytest.raises(ValueError, match="allowed: grad, no_grad"):
        serving.InferenceServer("fast")
    with pytest.raises(ValueError, match="allowed: resnet50"):
        serving.InferenceServer("grad", workload="bert")
    with pytest.raises(ValueError, match="n must be"):
        serving.run("grad", n=serving.MAX_REQUESTS + 1)
    with pytest.raises(ValueError, match="loopback"):
        serving.send_requests("http://example.com/predict", 1)
    with pytest.raises(ValueError, match="allowed"):
        serving.compare(["grad", "nope"])
    assert _server_threads() == []


def test_c25_is_not_testable_but_measures_the_mechanism():
    from nogradlab import claims

    r = claims.check("C25", device="cpu", scale="tiny", requests=3)
    assert r.verdict == "not testable"
    s = r.evidence["summaries"]
    assert s["no_grad"]["saved_bytes_per_request"] == 0 < s["grad"]["saved_bytes_per_request"]
    assert r.evidence["series"]["keep_outputs"]["held_bytes"][-1] > 0 == s["grad"]["held_bytes_after_last"]
    assert len(r.evidence["series"]["grad"]["request"]) == 3
    json_ok = r.to_dict()
    assert json_ok["measurements"]["statistic"]["testable"] is False


def test_a_stopped_server_starts_again():
    srv = serving.InferenceServer("no_grad")
    for _ in range(2):
        srv.start()
        try:
            with urllib.request.urlopen(srv.url, timeout=10) as resp:
                assert resp.status == 200
            with pytest.raises(RuntimeError, match="already started"):
                srv.start()
        finally:
            srv.stop()
        assert not srv.running
    assert _server_threads() == []
