"""POST /v1/memory/trace end to end: a real worker subprocess, real Redis, the limits."""

import asyncio
import sys
from typing import Any

import msgspec
import pytest
import redis
from litestar.testing import TestClient

from gpuplan.api.app import create_app
from gpuplan.api.routes import trace as trace_route
from gpuplan.config.settings import Settings

pytestmark = [pytest.mark.slow, pytest.mark.torch]

LLAMA = {
    "model_type": "llama",
    "vocab_size": 1000,
    "hidden_size": 128,
    "intermediate_size": 344,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
}
BODY: dict[str, Any] = {
    "model": {"hf_config": LLAMA},
    "workload": {"mode": "training", "batch_size": 2, "sequence_length": 64},
    "runtime": "cpu",
}


def test_trace_runs_in_a_worker_and_is_cached(
    redis_url: str, key_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("transformers")
    from gpuplan.core.trace.schema import TraceWorkload
    from gpuplan.trace.hf import builder
    from gpuplan.trace.run import trace

    settings = Settings(redis_url=redis_url, trace_cache_prefix=key_prefix)
    with TestClient(app=create_app(settings)) as client:
        first = client.post("/v1/memory/trace", json=BODY)
        assert first.status_code == 200, first.text
        result = first.json()
        # The same trace in this process gives the same bytes.
        workload = msgspec.convert(BODY["workload"], TraceWorkload)
        direct = trace(builder(LLAMA, workload), runtime="cpu")
        assert result["peak_bytes"] == direct.peak_bytes
        assert result["parameters"] == direct.parameters
        assert result["breakdown"]["optimizer_state_bytes"] > 0
        assert result["phases"]["backward_bytes"] > 0
        keys = redis.Redis.from_url(redis_url).keys(key_prefix + "*")
        assert len(keys) == 1

        # A second identical request (keys in another order) never reaches a worker.
        async def no_worker(*args: object) -> None:
            raise AssertionError("the cache should have answered")

        monkeypatch.setattr(trace_route, "run_worker", no_worker)
        reordered = {
            "runtime": "cpu",
            "workload": dict(reversed(list(BODY["workload"].items()))),
            "model": {"hf_config": dict(reversed(list(LLAMA.items())))},
        }
        second = client.post("/v1/memory/trace", json=reordered)
        assert second.status_code == 200
        assert second.json() == result
    redis.Redis.from_url(redis_url).delete(*keys)


def test_a_cache_entry_another_build_wrote_is_a_miss(redis_url: str, key_prefix: str) -> None:
    """Two builds under one version (a rolling upgrade) share the cache: an entry that does
    not decode is recomputed and overwritten, not answered with a 500."""
    pytest.importorskip("transformers")
    from gpuplan.core.trace.schema import TraceRequest

    settings = Settings(redis_url=redis_url, trace_cache_prefix=key_prefix)
    key = trace_route.cache_key(
        msgspec.convert(BODY, TraceRequest), key_prefix, settings.trace_probe_budget_bytes
    )
    store = redis.Redis.from_url(redis_url)
    store.set(key, b'{"parameters": 1, "a_field_of_another_build": 2}')
    with TestClient(app=create_app(settings)) as client:
        response = client.post("/v1/memory/trace", json=BODY)
    assert response.status_code == 200, response.text
    assert response.json()["parameters"] > 1
    assert msgspec.json.decode(store.get(key) or b"{}")["parameters"] > 1
    store.delete(key)


def test_unknown_model_type_is_422_naming_the_config() -> None:
    pytest.importorskip("transformers")
    body = {"model": {"hf_config": {**LLAMA, "model_type": "no-such-model"}}}
    with TestClient(app=create_app(Settings())) as client:
        response = client.post("/v1/memory/trace", json=body)
    assert response.status_code == 422
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["type"] == "urn:gpuplan:problem:invalid-model"
    assert problem["errors"][0]["path"] == "$.model.hf_config.model_type"
    assert len(problem["detail"]) < 500  # not transformers' list of every model type


def test_time_limit_kills_the_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    # The cost predictor would refuse a second's limit (a process start alone costs
    # more); without the start counted, the trace runs and is killed at the limit.
    monkeypatch.setattr(trace_route, "PROCESS_START_SECONDS", 0.0)
    with TestClient(app=create_app(Settings(trace_timeout_seconds=1.0))) as client:
        response = client.post("/v1/memory/trace", json=BODY)
    assert response.status_code == 504
    assert response.json()["type"] == "urn:gpuplan:problem:trace-timeout"
    assert "GPUPLAN_TRACE_TIMEOUT_SECONDS" in response.json()["detail"]


def test_concurrency_limit_answers_503() -> None:
    app = create_app(Settings(trace_max_concurrent=1))
    app.state["trace_gate"] = asyncio.Semaphore(0)  # every slot taken
    with TestClient(app=app) as client:
        response = client.post("/v1/memory/trace", json=BODY)
    assert response.status_code == 503
    assert response.headers["retry-after"] == "5"
    assert response.json()["type"] == "urn:gpuplan:problem:trace-busy"


@pytest.mark.parametrize("library", ["torch", "transformers"])
def test_501_without_the_trace_extra(library: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, library, None)  # `import library` now fails
    with TestClient(app=create_app(Settings())) as client:
        response = client.post("/v1/memory/trace", json=BODY)
    assert response.status_code == 501
    assert response.headers["content-type"] == "application/problem+json"
    assert library in response.json()["detail"]


def test_schema_bounds_are_422() -> None:
    body = {**BODY, "workload": {"batch_size": 0}}
    with TestClient(app=create_app(Settings())) as client:
        response = client.post("/v1/memory/trace", json=body)
    assert response.status_code == 422
    assert response.json()["errors"][0]["path"] == "$.workload.batch_size"


def test_worker_traces_a_sharded_workload(
    monkeypatch: pytest.MonkeyPatch, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    """The worker's protocol, in-process: parallel degrees reach the tracer."""
    pytest.importorskip("transformers")
    import io
    from types import SimpleNamespace

    from gpuplan.trace import worker

    body = {**BODY, "workload": {**BODY["workload"], "tensor_parallel": 2}}
    stdin = SimpleNamespace(buffer=io.BytesIO(msgspec.json.encode(body)))
    monkeypatch.setattr(sys, "stdin", stdin)
    assert worker.main() == 0
    answer = msgspec.json.decode(capsysbinary.readouterr().out)
    assert any("tensor parallel: rank 0 of 2" in note for note in answer["result"]["notes"])

    bad = {"model": {"hf_config": {**LLAMA, "vocab_size": "many"}}, "runtime": "cpu"}
    monkeypatch.setattr(sys, "stdin", SimpleNamespace(buffer=io.BytesIO(msgspec.json.encode(bad))))
    assert worker.main() == 0
    answer = msgspec.json.decode(capsysbinary.readouterr().out)
    assert answer["error"] in ("invalid", "untraceable")


MAMBA = {
    "model_type": "mamba",
    "vocab_size": 256,
    "hidden_size": 64,
    "state_size": 8,
    "num_hidden_layers": 1,
    "intermediate_size": 128,
    "conv_kernel": 4,
    "time_step_rank": 8,
}


def test_kernel_probes_follow_the_server_budget() -> None:
    """A runtime cpu trace of a model with a convolution measures its oneDNN scratch
    within the server's budget, and says what the budget left out."""
    pytest.importorskip("transformers")
    body = {
        "model": {"hf_config": MAMBA},
        "workload": {"batch_size": 2, "sequence_length": 32, "attention": "eager"},
        "runtime": "cpu",
    }
    notes = {}
    for budget in (4096, 64 * 1024 * 1024):
        settings = Settings(trace_probe_budget_bytes=budget)
        with TestClient(app=create_app(settings)) as client:
            response = client.post("/v1/memory/trace", json=body)
        assert response.status_code == 200, response.text
        notes[budget] = " ".join(response.json()["notes"])
    assert "probe budget of 4,096 bytes" in notes[4096]
    assert "measured by running each once on this CPU" in notes[64 * 1024 * 1024]
    assert "not counted" not in notes[64 * 1024 * 1024]


def test_the_probe_budget_is_part_of_the_cache_key() -> None:
    from gpuplan.core.trace.schema import TraceRequest

    cpu = msgspec.convert(BODY, TraceRequest)
    cuda = msgspec.convert({**BODY, "runtime": "cuda"}, TraceRequest)
    assert trace_route.cache_key(cpu, "k:", 0) != trace_route.cache_key(cpu, "k:", 1)
    assert trace_route.cache_key(cuda, "k:", 0) == trace_route.cache_key(cuda, "k:", 1)


def test_contradicting_workload_fields_are_422_naming_the_field() -> None:
    """Decode steps in a training workload: refused before a worker starts."""
    body = {"model": {"hf_config": LLAMA}, "workload": {"mode": "training", "new_tokens": 4}}
    with TestClient(app=create_app(Settings())) as client:
        response = client.post("/v1/memory/trace", json=body)
    assert response.status_code == 422
    assert response.headers["content-type"].startswith("application/problem+json")
    problem = response.json()
    assert problem["type"] == "urn:gpuplan:problem:invalid-workload"
    assert [e["path"] for e in problem["errors"]] == ["$.workload.new_tokens"]


def test_worker_traces_decode_steps(
    monkeypatch: pytest.MonkeyPatch, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    pytest.importorskip("transformers")
    import io
    from types import SimpleNamespace

    from gpuplan.trace import worker

    body = {
        "model": {"hf_config": LLAMA},
        "workload": {"mode": "inference", "batch_size": 2, "sequence_length": 16, "new_tokens": 4},
        "runtime": "cpu",
    }
    stdin = SimpleNamespace(buffer=io.BytesIO(msgspec.json.encode(body)))
    monkeypatch.setattr(sys, "stdin", stdin)
    assert worker.main() == 0
    result = msgspec.json.decode(capsysbinary.readouterr().out)["result"]
    assert result["new_tokens"] == 4
    assert result["phases"]["decode_bytes"] > 0


def test_a_cancelled_trace_kills_its_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """A request that goes away (client gone, shutdown) takes its worker process with it."""
    from gpuplan.core.trace.schema import TraceRequest

    started: list[asyncio.subprocess.Process] = []
    spawn = asyncio.create_subprocess_exec

    async def recorded(*args: Any, **kwargs: Any) -> asyncio.subprocess.Process:
        process = await spawn(*args, **kwargs)
        started.append(process)
        return process

    monkeypatch.setattr(asyncio, "create_subprocess_exec", recorded)

    async def cancel_midway() -> None:
        request = msgspec.convert(BODY, TraceRequest)
        task = asyncio.create_task(trace_route.run_worker(request, 60.0, 1 << 30))
        while not started:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_midway())
    assert started[0].returncode is not None  # killed and reaped, not left running
