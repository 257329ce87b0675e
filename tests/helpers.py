"""What many tests share: problem assertions, the live fleet in Redis, and request bodies."""

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import yaml
from click.testing import CliRunner, Result
from litestar import Litestar
from litestar.testing import TestClient
from redis.asyncio import Redis

from gpuplan.api.app import create_app
from gpuplan.config.settings import Settings
from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.fleet import NodeSnapshot
from gpuplan.core.perf.efficiency import efficiency_data, generation
from gpuplan.core.perf.step_records import Rates
from gpuplan.fleet.schema import Keys
from gpuplan.fleet.writer import publish
from tests.conftest import RedisServer, forget_keys

PROBLEM = "application/problem+json"


def problem(response: httpx.Response, status: int | tuple[int, ...], *words: str) -> dict[str, Any]:
    """The RFC 9457 body of ``response``, checked: one of ``status``, the problem media
    type, the required members, and each of ``words`` somewhere in it."""
    statuses = (status,) if isinstance(status, int) else status
    assert response.status_code in statuses, (response.status_code, response.text[:500])
    assert response.headers["content-type"].startswith(PROBLEM), response.headers
    body: dict[str, Any] = response.json()
    assert {"type", "title", "status", "detail"} <= body.keys(), body
    assert body["status"] == response.status_code
    text = json.dumps(body)
    for word in words:
        assert word in text, (word, text[:500])
    return body


def problem_at(response: httpx.Response, path: str, status: int = 422) -> dict[str, Any]:
    """A problem that names ``path`` among its offending fields."""
    body = problem(response, status)
    assert path in [e["path"] for e in body.get("errors", [])], body
    return body


def publish_snapshots(
    redis_url: str, prefix: str, *snapshots: NodeSnapshot, new_benchmark: bool = True
) -> None:
    """Publish node snapshots to a real Redis, as agents do."""

    async def go() -> None:
        client = Redis.from_url(redis_url)
        try:
            for snap in snapshots:
                await publish(client, Keys(prefix), snap, new_benchmark=new_benchmark)
        finally:
            await client.aclose()

    asyncio.run(go())


def fleet_not_configured(response: httpx.Response) -> None:
    """A fleet route's 404 without a Redis configured (no Retry-After: nothing will
    change until the server is configured): the problem names the setting."""
    body = problem(response, 404)
    assert body["type"] == "urn:gpuplan:problem:fleet-not-configured"
    assert "GPUPLAN_REDIS_URL" in body["detail"]
    assert "retry-after" not in response.headers


def redis_outage(own_redis: RedisServer, client: TestClient[Litestar], path: str) -> None:
    """Stop ``own_redis``: ``GET path`` answers 503, Redis does not answer, retry in 10 s.
    Then start it again, empty (no persistence): up, but holding no node yet."""
    own_redis.stop()
    response = client.get(path)
    assert response.status_code == 503
    assert response.headers["retry-after"] == "10"
    assert "does not answer" in response.json()["detail"]
    own_redis.start()


def fleet_client(redis_url: str | None, prefix: str = "gpuplan:v1:") -> TestClient[Litestar]:
    """An app that reads the fleet from ``redis_url`` under ``prefix`` (None: no Redis)."""
    settings = Settings(redis_url=redis_url, fleet_key_prefix=prefix, redis_timeout_seconds=0.3)
    return TestClient(app=create_app(settings))


def request_body(model: str, **workload: Any) -> dict[str, Any]:
    """A request body's model and workload: the preset ``model`` under ``workload`` (its
    members in the order given). Spread it into a body that adds the other members."""
    return {"model": {"name": model}, "workload": workload}


LLAMA_TRAINING: dict[str, Any] = {
    **request_body(
        "llama-2-7b",
        mode="training",
        sequence_length=4096,
        precision="amp_bf16",
        gradient_checkpointing="full",
    ),
    "training": {"training_tokens": 100_000_000},
}
"""A Llama-2-7B full fine-tune of 10^8 tokens: the CI plan tests' job."""

EVERY_TARGET: dict[str, Any] = {
    "fits": {"gpu": "NVIDIA A100-SXM4-80GB", "count": 4},
    "max_cost_usd": 1000,
    "max_time_hours": 48,
    "mig_profile_at_most": {"gpu": "a100-sxm4-80gb", "profile": "7g.80gb"},
    "min_memory_headroom": 0.2,
}
"""One of each CI target: for ``LLAMA_TRAINING``, four A100s fit and a MIG instance does not."""


TINY_LLAMA: dict[str, Any] = {
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 688,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 1000,
    "max_position_embeddings": 512,
}
"""A two-layer Llama ``config.json``: a valid model small enough to trace in a test."""


def drop_jobs(redis_url: str, key_prefix: str) -> None:
    """Delete what a test's job queues left in a shared Redis: the queues and registries
    (their names hold ``key_prefix``), the jobs they name, and the trace cache."""
    forget_keys(redis_url, key_prefix)


def job_settings(redis_url: str, key_prefix: str, **changes: Any) -> Settings:
    """Settings of an API with a job queue whose keys are the test's own."""
    return Settings(
        redis_url=redis_url,
        job_queue=True,
        job_queue_prefix=f"{key_prefix}jobs:",
        trace_cache_prefix=f"{key_prefix}trace:",
        **changes,
    )


def bf16_rates(gpu: str, table: str | None = None) -> Rates:
    """A catalog GPU's bf16 rates as the speed model builds them, timed by the measured
    kernel ``table`` (None: the roofline)."""
    spec = builtin_catalog().get(gpu)
    return Rates(
        peak_flops=spec.peak_flops["bf16"],
        attention_peak_flops=spec.peak_flops["bf16"],
        bandwidth_bytes_per_s=float(spec.memory_bandwidth_bytes_per_s),
        generation=generation(spec),
        kernels=efficiency_data().kernels,
        kernel_table=table,
    )


def run_plan_file(
    tmp_path: Path, doc: dict[str, Any], name: str = "plan.yaml", options: tuple[str, ...] = ()
) -> Result:
    """``gpuplan plan`` on ``doc`` written as a YAML plan file under ``tmp_path``, with
    the command's ``options`` (``("--format", "json")``)."""
    from gpuplan.cli import main

    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return CliRunner().invoke(main, ["plan", str(path), *options])


def seeded_model(config: dict[str, Any]) -> Any:
    """A randomly initialized transformers model of ``config`` (its ``model_type`` among
    the keys), seeded: a causal LM, or a masked LM for the BERT family."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM

    values = dict(config)
    model_type = str(values.pop("model_type"))
    hf = AutoConfig.for_model(model_type, **values)
    cls = AutoModelForMaskedLM if model_type in ("bert", "roberta") else AutoModelForCausalLM
    torch.manual_seed(0)
    return cls.from_config(hf)  # type: ignore[no-untyped-call]
