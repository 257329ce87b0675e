"""The example of every operation: the requests, and the recorder of their answers.

    python -m tests.examples     # re-record service/gpuplan/api/examples/*.json,
                                 # regenerate docs/api-examples.md, the report
                                 # docs/ci.md quotes and README.md's curl samples
                                 # (needs Redis on 127.0.0.1:6379 and the trace extra)

The answers come from the real app: fleet answers from a Redis holding two recorded
nodes, the trace from a real trace worker. tests/test_examples.py recomputes the
answers that depend on the request alone and fails when a file drifts.
"""

import json
import re
import sys
import uuid
from pathlib import Path
from typing import Any

import msgspec
from click.testing import CliRunner
from litestar.testing import TestClient

from gpuplan.api.app import create_app
from gpuplan.api.example_files import Example, ExampleRequest, ExampleResponse, shorten
from gpuplan.cli import main as cli
from gpuplan.config.settings import Settings
from tests.conftest import forget_keys
from tests.helpers import TINY_LLAMA, publish_snapshots, request_body

ROOT = Path(__file__).resolve().parent.parent
FILES = ROOT / "service" / "gpuplan" / "api" / "examples"
DOC = ROOT / "docs" / "api-examples.md"
CI_DOC = ROOT / "docs" / "ci.md"
CI_EXAMPLE = ROOT / "examples" / "llm-finetune-one-gpu.yaml"
CI_QUOTE = re.compile(r"(```markdown\n)(.*?)(```\n)", re.S)
"""docs/ci.md quotes the head of ``gpuplan plan`` on CI_EXAMPLE: its verdicts, memory
and table, up to the advice (tests/test_plan_ci_doc.py checks it is the head)."""


def post(path: str, **body: Any) -> ExampleRequest:
    """A POST of ``body``, its members in the order given, to ``path``."""
    return ExampleRequest(method="POST", path=path, body=body)


JOB_PATH = "/v1/jobs/{id}"
"""Stands for a job's path until a recording submits one."""

REQUESTS: dict[str, tuple[str, ExampleRequest]] = {
    "healthz": ("Liveness", ExampleRequest(method="GET", path="/healthz")),
    "readyz": ("Readiness with Redis answering", ExampleRequest(method="GET", path="/readyz")),
    "metrics": ("The first lines of the exposition", ExampleRequest(method="GET", path="/metrics")),
    "version": ("The running version", ExampleRequest(method="GET", path="/v1/version")),
    "list_gpus": (
        "NVIDIA GPUs with MIG, largest memory first",
        ExampleRequest(
            method="GET",
            path="/v1/gpus",
            query={"vendor": "nvidia", "mig": "true", "sort": "memory_bytes", "order": "desc"},
        ),
    ),
    "get_gpu": (
        "One GPU by its GPU feature discovery label",
        ExampleRequest(method="GET", path="/v1/gpus/NVIDIA-H100-80GB-HBM3"),
    ),
    "estimate_memory": (
        "A LoRA fine-tune of Llama 3.1 8B on one L4",
        post(
            "/v1/memory/estimate",
            **request_body(
                "llama-3.1-8b",
                mode="finetune_lora",
                batch_size=4,
                sequence_length=2048,
                gradient_checkpointing="full",
            ),
            gpu="NVIDIA L4",
        ),
    ),
    "trace_memory": (
        "A training step of a two-layer Llama config, traced",
        post(
            "/v1/memory/trace",
            model={"hf_config": TINY_LLAMA},
            workload={"mode": "training", "batch_size": 2, "sequence_length": 128},
            runtime="cuda",
        ),
    ),
    "list_models": ("The built-in presets", ExampleRequest(method="GET", path="/v1/models")),
    "recommendations": (
        "The cheapest GPUs for a billion-token Llama 3.1 8B fine-tune, at RunPod's or Lambda's prices",
        post(
            "/v1/recommendations",
            **request_body(
                "llama-3.1-8b", mode="training", sequence_length=4096, gradient_checkpointing="full"
            ),
            training={"training_tokens": 1_000_000_000, "global_batch_tokens": 1_048_576},
            objective="cheapest",
            pricing={"providers": ["runpod", "lambda"]},
            limit=2,
        ),
    ),
    "mig_profiles": (
        "The MIG profiles of an A100 80GB",
        ExampleRequest(method="GET", path="/v1/mig/profiles", query={"gpu": "a100-sxm4-80gb"}),
    ),
    "mig_validate": (
        "Is 4g.40gb beside 3g.40gb one A100's layout?",
        post(
            "/v1/mig/validate",
            gpu="a100-sxm4-80gb",
            instances=[{"profile": "4g.40gb"}, {"profile": "3g.40gb"}],
        ),
    ),
    "mig_plan": (
        "Two 35 GiB services and three notebooks on H100s, with every output",
        post(
            "/v1/mig/plan",
            gpu="h100-sxm5-80gb",
            workloads=[
                {"name": "llm", "memory_gib": 35, "count": 2},
                {"name": "notebook", "profile": "1g.10gb", "count": 3},
            ],
            output=["mig-parted", "dra", "device-plugin"],
        ),
    ),
    "mig_slices": (
        "Free MIG instances of at least 10 GiB across the fleet",
        ExampleRequest(method="GET", path="/v1/mig/slices", query={"memory_gib": "10"}),
    ),
    "plan_job": (
        "A CI plan: does this fine-tune fit one A100 within $1,000?",
        post(
            "/v1/plan",
            **request_body(
                "llama-2-7b",
                mode="finetune_lora",
                sequence_length=4096,
                gradient_checkpointing="full",
            ),
            training={"training_tokens": 100_000_000},
            objective="cheapest",
            limit=2,
            targets={"fits": {"gpu": "a100-sxm4-80gb", "count": 1}, "max_cost_usd": 1000},
        ),
    ),
    "get_job": (
        "A trace submitted with `Prefer: respond-async`, after a worker ran it",
        ExampleRequest(method="GET", path=JOB_PATH),
    ),
    "cancel_job": (
        "Cancelling a trace still in the queue",
        ExampleRequest(method="DELETE", path=JOB_PATH),
    ),
    "list_nodes": ("The live fleet", ExampleRequest(method="GET", path="/v1/fleet/nodes")),
    "get_node": ("One live node", ExampleRequest(method="GET", path="/v1/fleet/nodes/node-a")),
    "fleet_flops": (
        "Measured matmul FLOP/s per GPU model across the fleet",
        ExampleRequest(method="GET", path="/v1/fleet/flops"),
    ),
    "fleet_placements": (
        "Where a 40 GiB, 3-slice workload goes with the fewest disruptions",
        ExampleRequest(
            method="GET",
            path="/v1/fleet/placements",
            query={"memory_gib": "40", "compute_slices": "3"},
        ),
    ),
    "place_workload": (
        "Where a workload on a 1g.18gb instance goes, asked with a JSON body",
        post("/v1/fleet/placements", profile="1g.18gb"),
    ),
}
"""Each operation's example request, by operationId."""

FROM_REQUEST_ALONE = frozenset(
    {
        "healthz",
        "list_gpus",
        "get_gpu",
        "estimate_memory",
        "list_models",
        "recommendations",
        "mig_profiles",
        "mig_validate",
        "mig_plan",
        "plan_job",
    }
)
"""Operations whose answer the request and the built-in catalog decide (checked exactly)."""

METRICS_LINES = 8


def answer(client: TestClient, request: ExampleRequest) -> ExampleResponse:  # type: ignore[type-arg]
    """The app's answer to ``request``, shortened as examples are."""
    response = client.request(
        request.method, request.path, params=request.query or None, json=request.body
    )
    if response.headers["content-type"].startswith("text/plain"):
        lines = [line for line in response.text.splitlines() if line][:METRICS_LINES]
        return ExampleResponse(status=response.status_code, body="\n".join(lines) + "\n")
    return ExampleResponse(status=response.status_code, body=shorten(response.json()))


def render_doc(examples: dict[str, Example]) -> str:
    """docs/api-examples.md: every operation's example request and answer."""
    out = [
        "# API examples",
        "",
        "One request and its answer per operation, recorded from the running service by",
        "`python -m tests.examples` (lists in answers shortened to their first two items);",
        "the same examples are in the OpenAPI document (`api/openapi.yaml`). A test recomputes",
        "the answers that depend on the request alone, so these stay what the service says.",
        "",
    ]
    for name, ex in sorted(examples.items()):
        req = ex.request
        query = "&".join(f"{k}={v}" for k, v in req.query.items())
        target = req.path + (f"?{query}" if query else "")
        out += [f"## `{req.method} {req.path}` ({name})", "", ex.summary + ":", ""]
        if req.body is None:
            out += ["```sh", f"curl -s 'http://127.0.0.1:8000{target}'", "```", ""]
        else:
            out += [
                "```sh",
                f"curl -s http://127.0.0.1:8000{target} -H 'content-type: application/json' -d @- <<'EOF'",
                json.dumps(req.body, indent=2),
                "EOF",
                "```",
                "",
            ]
        body = ex.response.body
        text = body if isinstance(body, str) else json.dumps(body, indent=2, ensure_ascii=False)
        lang = "text" if isinstance(body, str) else "json"
        out += [f"Answer ({ex.response.status}):", "", f"```{lang}", text.rstrip("\n"), "```", ""]
    return "\n".join(out)


def _job_paths(redis_url: str, prefix: str) -> dict[str, str]:
    """Two traces submitted asynchronously to a queue of the recording's own: one run by a
    worker (in burst mode, here), one left queued to be cancelled."""
    from rq.serializers import JSONSerializer

    from gpuplan.jobs.queue import connect, queue_names
    from gpuplan.jobs.worker import TraceWorker

    settings = Settings(
        answer_cache_bytes=0,
        redis_url=redis_url,
        job_queue=True,
        job_queue_prefix=prefix,
        trace_cache_ttl_seconds=0,
    )
    body = REQUESTS["trace_memory"][1].body
    with TestClient(create_app(settings)) as client:
        ran = client.post("/v1/memory/trace", json=body, headers={"Prefer": "respond-async"})
        connection = connect(redis_url, 5.0)
        worker = TraceWorker(
            queue_names(prefix),
            name=f"{prefix}worker",
            connection=connection,
            serializer=JSONSerializer,
        )
        worker.work(burst=True)
        waiting = client.post(
            "/v1/memory/trace?priority=low", json=body, headers={"Prefer": "respond-async"}
        )
    return {"get_job": ran.headers["location"], "cancel_job": waiting.headers["location"]}


def record() -> dict[str, Example]:
    from tests.agent_fixtures import snapshot

    prefix = f"gpuplan-examples:{uuid.uuid4().hex}:"
    redis_url = "redis://127.0.0.1:6379/0"
    plain = Settings(answer_cache_bytes=0)
    fleet = Settings(answer_cache_bytes=0, redis_url=redis_url, fleet_key_prefix=prefix)
    jobs_prefix = f"gpuplan-examples:{uuid.uuid4().hex}:jobs:"
    jobs = Settings(
        answer_cache_bytes=0, redis_url=redis_url, job_queue=True, job_queue_prefix=jobs_prefix
    )
    found = {}
    try:
        paths = _job_paths(redis_url, jobs_prefix)
        # After the trace job, which can outlast the snapshots' 30 s time to live on a
        # loaded machine (the live fleet's examples then answer 404).
        publish_snapshots(
            redis_url, prefix, snapshot("node-a"), snapshot("node-b", fixture="a100-pcie-mig")
        )
        with (
            TestClient(create_app(plain)) as pure,
            TestClient(create_app(fleet)) as live,
            TestClient(create_app(jobs)) as queued,
        ):
            for name, (summary, request) in REQUESTS.items():
                client = pure if name in FROM_REQUEST_ALONE else live
                asked = request
                if name in paths:
                    client = queued
                    asked = msgspec.structs.replace(request, path=paths[name])
                answered = answer(client, asked)
                found[name] = Example(summary=summary, request=asked, response=answered)
    finally:  # the recording's fleet and queues leave the shared Redis with it
        forget_keys(redis_url, prefix)
        forget_keys(redis_url, jobs_prefix)
    return found


def ci_report() -> str:
    """The head of the markdown report docs/ci.md quotes, as the command prints it."""
    result = CliRunner().invoke(cli, ["plan", str(CI_EXAMPLE), "--format", "markdown"])
    return result.output.split("**Advice**")[0].rstrip("\n") + "\n"


def requote_ci() -> None:
    text = CI_DOC.read_text(encoding="utf-8")
    quoted, n = CI_QUOTE.subn(lambda m: m[1] + ci_report() + m[3], text, count=1)
    assert n == 1, "docs/ci.md lost its quoted report"
    CI_DOC.write_text(quoted, encoding="utf-8")


def main() -> None:
    from tests import readme_samples

    readme_samples.main()
    requote_ci()
    examples = record()
    for name, example in examples.items():
        text = msgspec.json.format(msgspec.json.encode(example), indent=2).decode()
        (FILES / f"{name}.json").write_text(text + "\n", encoding="utf-8")
    DOC.write_text(render_doc(examples), encoding="utf-8")
    sys.stdout.write(f"recorded {len(examples)} examples in {FILES}\n")


if __name__ == "__main__":
    main()
