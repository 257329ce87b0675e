"""A serving plan as a command to run: the engine's launch arguments for one replica,
the replicas, and each replica's Kubernetes resources.

Every value the plan relied on is passed as a flag, whatever the engine's default: the
tensor-parallel degree, the memory share, the longest sequence, the sequences in flight
and the tokens of a step. The server then sizes its cache as the plan did, and a new
engine version with other defaults serves the same plan. Flag names are the engine's own
(``data/engines.toml``; tests/test_engine_flags.py checks them against the names read
from each engine's source).
"""

import shlex
from typing import NamedTuple

from gpuplan.core.catalog import GpuSpec
from gpuplan.core.memory.schema import Workload
from gpuplan.core.recommend.engine import engine_spec, kubernetes_resource
from gpuplan.core.recommend.engine_records import EngineSpec
from gpuplan.core.recommend.schema import Engine, KubernetesResources, Launch

SHELL_SAFE = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@%+=:,./-"
"""The characters ``shlex.quote`` leaves a word unquoted in (its ``[^\\w@%+=:,./-]``,
ASCII)."""


def _shell(command: list[str]) -> str:
    """``shlex.join(command)``: a word of safe characters only (most of a command's) is
    kept without a call to ``shlex.quote``, which a request's plans would make hundreds
    of times."""
    return " ".join(
        word if word and not word.strip(SHELL_SAFE) else shlex.quote(word) for word in command
    )


DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
"""A workload's precision as transformers' ``--dtype`` names it (others: ``auto``)."""

RANK_CAP = {
    "vllm": "--max-num-seqs is each rank's (every rank schedules its own)",
    "sglang": "--max-running-requests is the replica's (its scheduler divides it by --dp-size)",
    "trtllm": "--max_batch_size is each rank's (the ranks admit tp_size x max_batch_size: "
    "tensorrt_llm/_torch/pyexecutor/executor_request_queue.py at a98a9061, "
    "_fetch_new_requests_attention_dp)",
}
"""What an expert-parallel replica's sequence cap counts, engine by engine."""

TRTLLM_CONFIG = "extra-llm-api-options.yaml"
"""The file TensorRT-LLM's ``--config`` names, for the LLM API options no flag sets."""

FP8_KV = {"vllm": "fp8", "sglang": "fp8_e4m3"}
"""``workload.kv_cache_dtype: fp8`` as each engine's ``--kv-cache-dtype`` names it."""


class Plan(NamedTuple):
    """The values of one replica a command carries."""

    tp: int
    replicas: int
    max_model_len: int
    concurrency: int
    token_budget: int
    fraction: float | None
    kv_cache_bytes: float
    kv_cache_tokens: int
    output_tokens: int
    expert: int = 1
    """Expert-parallel ranks of one replica, each also a data-parallel attention rank
    (``tp`` is then 1): the replica has ``expert`` GPUs."""


def fraction_text(value: float) -> str:
    """A share as the command writes it: at most 3 decimals, no trailing zeros
    (SGLang rounds its own to 3)."""
    return f"{round(value, 3):.3f}".rstrip("0").rstrip(".")


def launch(
    plan: Plan,
    *,
    engine: Engine,
    version: str | None,
    gpu: GpuSpec,
    w: Workload,
    model: str,
    mixed_chunk: bool = True,
) -> Launch:
    """The launch of one plan on ``gpu`` (``mixed_chunk``: SGLang mixes prompt chunks
    into decode steps, as the plan was timed)."""
    spec = engine_spec(engine)
    command, notes = _command(engine, spec, w, model, plan, mixed_chunk=mixed_chunk)
    files: dict[str, str] = {}
    if plan.expert > 1:
        notes.append(
            f"{plan.expert} data-parallel attention ranks, each with {plan.concurrency} sequences "
            f"in flight: {RANK_CAP[engine]}"
        )
        if engine == "trtllm":
            files[TRTLLM_CONFIG] = "enable_attention_dp: true\n"
    return Launch(
        engine=engine,
        engine_version=version,
        source=spec.source,
        command=command,
        shell=_shell(command),
        replicas=plan.replicas,
        tensor_parallel=plan.tp,
        data_parallel=plan.expert,
        expert_parallel=plan.expert,
        max_model_len=plan.max_model_len,
        max_concurrency=_concurrency_flag(engine, plan),
        memory_fraction=None if plan.fraction is None else round(plan.fraction, 3),
        kv_cache_bytes_per_gpu=max(int(plan.kv_cache_bytes), 0),
        kv_cache_tokens=plan.kv_cache_tokens,
        resources=KubernetesResources(
            limits={kubernetes_resource(gpu): str(plan.tp * plan.expert)}
        ),
        config_files=files,
        notes=notes,
    )


def _command(
    engine: Engine, spec: EngineSpec, w: Workload, model: str, plan: Plan, *, mixed_chunk: bool
) -> tuple[list[str], list[str]]:
    notes: list[str] = []
    flags = spec.flags
    if engine == "transformers":
        command = [*spec.program, model, flags["dtype"], DTYPES.get(w.precision, "auto")]
        command += [flags["device"], "cuda"]
        notes.append(
            "transformers serve runs each request's generate with its own cache (no paged "
            "KV cache, no flag for the sequences in flight or the longest sequence)"
        )
        return command, notes
    if engine == "compiled":
        script = [
            "generate.py",
            flags["model"],
            f"checkpoints/{model}/model.pth",
            flags["compile"],
            flags["max_new_tokens"],
            str(plan.output_tokens),
        ]
        if plan.tp > 1:
            command = [*spec.program_tp, f"{flags['nproc']}={plan.tp}", *script]
        else:
            command = [*spec.program[:-1], *script]
        notes.append(
            "gpt-fast loads checkpoints/<repo>/model.pth, converted by its "
            "scripts/prepare.sh; its generate.py decodes one sequence at a time with a "
            "static cache of prompt + max_new_tokens and CUDA graphs"
        )
        return command, notes
    command = [*spec.program]
    if flags["model"]:
        command += [flags["model"], model]
    else:
        command.append(model)
    if engine == "trtllm":
        command += [flags["backend"], "pytorch"]
    assert plan.fraction is not None
    command += [
        flags["tensor_parallel"],
        # SGLang's and TensorRT-LLM's tp_size count every GPU of a DP-attention replica.
        str(plan.tp * plan.expert if engine in ("sglang", "trtllm") else plan.tp),
        flags["memory_fraction"],
        fraction_text(plan.fraction),
        flags["max_model_len"],
        str(plan.max_model_len),
        flags["max_concurrency"],
        str(_concurrency_flag(engine, plan)),
        flags["token_budget"],
        str(plan.token_budget),
    ]
    command += _expert_flags(engine, spec, plan.expert)
    if engine == "sglang" and mixed_chunk:
        # The speed model puts decodes and prompt chunks in one step; SGLang alternates
        # prefill and decode batches unless told to mix them (timed apart when the
        # request says mixed_chunk false).
        command.append(flags["mixed_chunk"])
    if engine == "trtllm":
        # trtllm-serve leaves chunked prefill off: a prompt longer than the step would
        # not go through in the budget the plan timed.
        command.append(flags["chunked_prefill"])
    if w.kv_cache_dtype == "fp8":
        if engine in FP8_KV:
            command += [flags["kv_cache_dtype"], FP8_KV[engine]]
        else:
            notes.append(
                "an fp8 KV cache is set in the YAML of --config (kv_cache_config.dtype), "
                "not by a flag"
            )
    return command, notes


def _expert_flags(engine: Engine, spec: EngineSpec, expert: int) -> list[str]:
    """Experts split ``expert`` ways, attention data-parallel over the same GPUs: vLLM
    ``--data-parallel-size N --enable-expert-parallel`` (EP size = TP x DP), SGLang
    ``--dp-size N --enable-dp-attention --ep-size N`` (its ``--tp-size`` is N too),
    TensorRT-LLM ``--ep_size N --config FILE`` with ``enable_attention_dp: true`` in the
    file (its ``--tp_size`` is N too)."""
    if expert <= 1:
        return []
    flags = spec.flags
    if engine == "vllm":
        return [flags["data_parallel"], str(expert), flags["expert_parallel"]]
    if engine == "sglang":
        return [
            flags["data_parallel"],
            str(expert),
            flags["dp_attention"],
            flags["expert_parallel"],
            str(expert),
        ]
    if engine == "trtllm":
        return [flags["expert_parallel"], str(expert), flags["config"], TRTLLM_CONFIG]
    return []


def _concurrency_flag(engine: Engine, plan: Plan) -> int:
    """The sequences-in-flight value the command sets: per data-parallel rank for vLLM,
    for the whole replica for SGLang (``per_dp_max_running_requests = max_running_requests
    // dp_size`` in its scheduler)."""
    return plan.concurrency * plan.expert if engine == "sglang" else plan.concurrency
