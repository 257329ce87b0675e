"""The recommendation's request and response: the schema of the API, the CLI and plan files.

The request is the memory estimate's request (model, workload, runtime) plus what a
recommendation needs beyond memory: the objective, the constraints, and the volume of
work (tokens to train, or a request rate to serve). Bounds keep every search finite.
"""

import datetime
from typing import Annotated, Literal

import msgspec

from gpuplan.core.catalog.model import Precision as CatalogPrecision
from gpuplan.core.catalog.model import PriceKind, ProviderId, Vendor
from gpuplan.core.memory.schema import Framework, ModelSpec, Runtime, Workload
from gpuplan.core.recommend.disagg_schema import Disaggregation
from gpuplan.core.record import Record
from gpuplan.core.uncertainty import Interval

Objective = Literal["cheapest", "fastest", "energy", "balanced"]
Deployment = Literal["cloud", "on_prem", "hybrid"]
RequiredInterconnect = Literal["any", "nvlink"]
GpuName = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
Positive = Annotated[float, msgspec.Meta(gt=0, le=1e15)]
Fraction = Annotated[float, msgspec.Meta(gt=0, le=1)]

MAX_GPUS = 65_536
"""The most GPUs one job may be planned on (the largest published runs use 16,384)."""

MAX_GLOBAL_BATCH = 1 << 24
"""The most sequences one optimizer step may hold."""

Layout = Literal["search", "given"]

Engine = Literal["vllm", "sglang", "trtllm", "transformers", "compiled"]
"""A serving engine (docs/serving.md): three paged, continuous-batching servers, and two
that keep a static cache per sequence."""

EngineVersion = Annotated[
    str, msgspec.Meta(min_length=1, max_length=64, pattern=r"^[0-9A-Za-z][0-9A-Za-z.+_-]*$")
]
ModelPath = Annotated[
    str, msgspec.Meta(min_length=1, max_length=256, pattern=r"^[0-9A-Za-z._/][0-9A-Za-z._/:+-]*$")
]


class PriceOverride(Record, kw_only=True):
    """Your prices for a GPU, replacing the price tables' and the catalog's (which carry
    an ``as_of`` date); a candidate priced by it names ``request`` as its provider."""

    cloud_usd_per_gpu_hour: Positive | None = None
    purchase_usd: Positive | None = None


class Constraints(Record, kw_only=True):
    """What the answer must respect."""

    vendors: Annotated[list[Vendor], msgspec.Meta(max_length=3)] = []
    include: Annotated[list[GpuName], msgspec.Meta(max_length=64)] = []
    """Only these GPUs (any lookup name); empty means the whole catalog."""

    exclude: Annotated[list[GpuName], msgspec.Meta(max_length=64)] = []
    max_gpus_per_job: Annotated[int, msgspec.Meta(ge=1, le=MAX_GPUS)] = 64
    """The most GPUs of one plan; the search tries every count from 1 to
    ``gpus_per_node`` and every whole number of nodes above, up to this."""

    gpu_counts: Annotated[
        list[Annotated[int, msgspec.Meta(ge=1, le=MAX_GPUS)]], msgspec.Meta(max_length=64)
    ] = []
    """Only these GPU counts (e.g. the sizes of the pools you have); empty: the search's."""

    max_usd_per_hour: Positive | None = None
    """Ceiling on the job's price per wall-clock hour (all its GPUs)."""

    max_total_usd: Positive | None = None
    deployment: Deployment = "cloud"
    """``cloud``: on-demand prices. ``on_prem``: purchase amortized plus electricity.
    ``hybrid``: the cheaper known basis per GPU, and the owned-pool + cloud-burst comparison."""

    electricity_usd_per_kwh: Annotated[float, msgspec.Meta(ge=0, le=10)] = 0.15
    pue: Annotated[float, msgspec.Meta(ge=1, le=3)] = 1.4
    """Power usage effectiveness of the data centre (facility power / IT power)."""

    amortization_years: Annotated[float, msgspec.Meta(gt=0, le=20)] = 3.0
    on_prem_utilization: Fraction = 0.6
    """Share of an owned GPU's hours that are busy; idle hours are charged to busy ones."""

    power_fraction_of_tdp: Fraction = 0.8
    """Average board power of a running job as a share of TDP."""

    required_interconnect: RequiredInterconnect = "any"
    """``nvlink``: multi-GPU plans only on GPUs with a scale-up link (NVLink, Infinity Fabric)."""

    gpus_per_node: Annotated[int, msgspec.Meta(ge=1, le=72)] = 8
    network_bytes_per_s_per_gpu: Annotated[float, msgspec.Meta(gt=0, le=1e13)] = 50e9
    """Inter-node bandwidth per GPU and direction (default 400 Gb/s, one NIC per GPU)."""

    prices: Annotated[dict[GpuName, PriceOverride], msgspec.Meta(max_length=64)] = {}
    """Your prices per GPU (any lookup name): they win over every price table."""

    preferred_gpu: GpuName | None = None
    """Advice explains how to make the job fit this GPU (any lookup name). Default: the
    GPU of the top recommendation (a plan file's ``targets.fits.gpu`` first); the answer's
    ``advice_gpu`` says which."""


class Evaluation(Record, kw_only=True):
    """Evaluations inside the training run (Hugging Face Trainer's ``eval_strategy``,
    Lightning's validation loop): each one forward pass over ``tokens``, without
    backward, recomputation, gradient traffic or optimizer step, on the plan's own
    layout and micro-batch. Their time is part of ``time_hours``, ``cost_usd`` and
    ``energy_kwh``, as it is of a loop that times them (Trainer's ``train_runtime`` and
    ``train_samples_per_second``); ``throughput`` stays the training steps' own rate, and
    ``evaluation_hours`` says how much of the time they take."""

    tokens: Annotated[int, msgspec.Meta(ge=1, le=10**14)]
    """Tokens one evaluation reads (images, for a vision model): the evaluation split as
    its batches hold it, packed or padded."""

    count: Annotated[int, msgspec.Meta(ge=1, le=10**6)] = 1
    """Evaluations over the run. Trainer's ``eval_strategy: epoch`` evaluates at the end
    of each epoch, and once more where ``max_steps`` ends a partial one
    (``DefaultFlowCallback.on_epoch_end``); ``steps`` every ``eval_steps``."""


class TrainingVolume(Record, kw_only=True):
    """Work of a training job: tokens, or samples, or epochs over a dataset."""

    training_tokens: Annotated[int, msgspec.Meta(ge=1, le=10**16)] | None = None
    samples: Annotated[int, msgspec.Meta(ge=1, le=10**14)] | None = None
    """Sequences to train on (each of ``workload.sequence_length`` tokens)."""

    epochs: Annotated[float, msgspec.Meta(gt=0, le=10_000)] | None = None
    dataset_samples: Annotated[int, msgspec.Meta(ge=1, le=10**13)] | None = None
    global_batch_size: Annotated[int, msgspec.Meta(ge=1, le=MAX_GLOBAL_BATCH)] | None = None
    """Sequences (images, for a vision model) per optimizer step across the job, kept on
    every GPU count the search tries (micro-batch and accumulation are re-split). Or give
    ``global_batch_tokens``, not both. Neither: ``batch_size`` x
    ``gradient_accumulation_steps`` x ``parallelism.data`` when the workload writes
    accumulation or data parallelism above 1, else a published recipe's batch with a
    warning: 4M tokens per step for ``training`` (Llama 2), 128 sequences for the LoRA
    modes (Stanford Alpaca), 256 images for a vision model (PyTorch's ImageNet example;
    docs/recommendation.md)."""

    global_batch_tokens: Annotated[int, msgspec.Meta(ge=1, le=10**13)] | None = None
    """Tokens per optimizer step across the job (Llama 3 states its batch so): the global
    batch is this over ``workload.sequence_length``, a whole number of sequences kept as
    it is, else rounded to the nearest multiple of 64 (the nearest power of two below 64)."""

    evaluation: Evaluation | None = None
    """Evaluations the run holds besides its training steps (none by default): their
    forward passes add to the job's time, cost and energy."""


class Slo(Record, kw_only=True):
    """Service-level objectives on percentiles of the latency under load: every request
    arriving (Poisson) at ``inference.requests_per_second``, spread over the replicas,
    sees them within the targets 95 times in 100 (docs/serving.md)."""

    ttft_p95_s: Annotated[float, msgspec.Meta(gt=0, le=3600)] | None = None
    """95th percentile of the time to first token: the wait for a slot in the engine,
    the step in progress, and the prompt's chunked prefill."""

    tpot_p95_s: Annotated[float, msgspec.Meta(gt=0, le=60)] | None = None
    """95th percentile of the time per output token: a request's decode time over its
    output tokens after the first, beside the sequences in flight."""


class InferenceVolume(Record, kw_only=True):
    """Work of a serving job: a sustained request rate over a period."""

    requests_per_second: Annotated[float, msgspec.Meta(gt=0, le=1e7)] | None = None
    """Sustained rate to serve; absent: one replica, reported at its own rate."""

    prompt_tokens: Annotated[int, msgspec.Meta(ge=1, le=10_000_000)] | None = None
    """Default: ``workload.sequence_length``."""

    output_tokens: Annotated[int, msgspec.Meta(ge=1, le=10_000_000)] | None = None
    """Default: ``workload.max_new_tokens``, or 256 when that is 0."""

    duration_hours: Annotated[float, msgspec.Meta(gt=0, le=87_600)] = 730.0
    """Period the cost and energy are for (default: one month, 730 h)."""

    max_time_to_first_token_s: Annotated[float, msgspec.Meta(gt=0, le=3600)] | None = None
    """Latency target: a replica serves no more sequences at once than keeps the time
    to first token (prefill plus one engine step, queueing aside) within it."""

    max_time_per_output_token_s: Annotated[float, msgspec.Meta(gt=0, le=60)] | None = None
    """Latency target: the time between output tokens each sequence sees (one decode
    step plus the share of other requests' prefills interleaved with it)."""

    slo: Slo | None = None
    """Percentile targets under load (``ttft_p95_s``, ``tpot_p95_s``): the plan caps the
    sequences per replica so that the slowest step keeps ``tpot_p95_s`` and adds replicas
    until the queueing model's p95s at ``requests_per_second`` hold. Needs
    ``requests_per_second``. The ``max_*`` targets keep their own, queue-free meaning."""

    max_concurrency: Annotated[int, msgspec.Meta(ge=1, le=65_536)] | None = None
    """Most sequences one replica keeps in flight (vLLM's ``--max-num-seqs``, SGLang's
    ``--max-running-requests``, TensorRT-LLM's ``--max_batch_size``). Default: the
    engine's default for the GPU (vLLM: 1024 on GPUs of 70 GiB and more except A100,
    else 256; docs/serving.md). A ``workload.batch_size`` above 1 fixes the concurrency
    instead."""

    engine: Engine = "vllm"
    """The serving engine, whose memory rule sizes the KV cache and whose launch command
    each candidate carries: ``vllm``, ``sglang``, ``trtllm`` (paged KV cache, continuous
    batching), ``transformers`` (``transformers serve``: a cache per sequence at its full
    length, one GPU) or ``compiled`` (torch.compile with CUDA graphs and a static cache,
    gpt-fast style). Default ``vllm``, the model the plans have always used."""

    engine_version: EngineVersion | None = None
    """Your engine's version (``0.34.0``), recorded in each candidate's ``launch``. The
    memory rules and flags are those of the source versions docs/serving.md cites."""

    max_model_len: Annotated[int, msgspec.Meta(ge=1, le=10_000_000)] | Literal["auto"] | None = None
    """Longest sequence (prompt + output) the engine accepts (vLLM ``--max-model-len``,
    SGLang ``--context-length``, TensorRT-LLM ``--max_seq_len``): the KV cache must hold
    one sequence of it. ``auto``: the longest that fits the replica (at most the model's
    own context). Default: ``prompt_tokens + output_tokens``."""

    memory_fraction: Fraction | None = None
    """The engine's share of GPU memory, in its own terms: vLLM's
    ``--gpu-memory-utilization`` (of the GPU, for everything; default 0.90), SGLang's
    ``--mem-fraction-static`` (of the memory free before the model loads, for weights and
    the KV pool; default SGLang's rule for the GPU), TensorRT-LLM's
    ``--free_gpu_memory_fraction`` (of what the weights and a profile step leave free,
    for the KV cache; default 0.9). Not for ``transformers`` or ``compiled``."""

    max_batched_tokens: Annotated[int, msgspec.Meta(ge=16, le=1 << 20)] | None = None
    """Tokens one engine step takes at most, decodes and prompt chunks together (vLLM
    ``--max-num-batched-tokens``, SGLang ``--chunked-prefill-size``, TensorRT-LLM
    ``--max_num_tokens``). Default: the engine's for the GPU (docs/serving.md). Not for
    ``transformers`` or ``compiled``."""

    mixed_chunk: bool = True
    """SGLang only: prompt chunks ride in the decode steps (``--enable-mixed-chunk``, which
    the launch command then carries). ``false``: SGLang's default, prompts run in
    prefill batches of their own between decode steps, and every sequence in flight
    waits for them (docs/serving.md). The other engines mix them always."""

    model_path: ModelPath | None = None
    """What the launch command loads (a Hugging Face repo id or a local path). Default:
    the preset's Hugging Face repo, else ``MODEL`` to fill in."""

    compare_disaggregated: bool = False
    """Also size each fitting serving candidate as disaggregated prefill and decode pools
    (xPyD, with the KV cache moved between them) for the same targets and rate, and say
    which wins (``disaggregation`` on the candidate; docs/serving.md)."""


class Efficiency(Record, kw_only=True):
    """Overrides of the speed model's defaults (docs/recommendation.md)."""

    mfu: Annotated[float, msgspec.Meta(ge=0.01, le=1)] | None = None
    """Model FLOPs utilization for training and prefill, all GPUs: replaces the kernel
    model (model FLOPs at peak x mfu; recomputation, communication, bubbles still added)."""

    mbu: Annotated[float, msgspec.Meta(ge=0.01, le=1)] | None = None
    """Memory-bandwidth utilization of decode, all GPUs."""

    comm_overlap: Annotated[float, msgspec.Meta(ge=0, le=1)] | None = None
    """Share of backward behind which gradient communication hides."""


class Pricing(Record, kw_only=True):
    """Whose cloud prices the costs use: one stated basis for every GPU (docs/catalog.md
    lists the tables, their sources and dates)."""

    providers: Annotated[list[ProviderId], msgspec.Meta(max_length=8)] = []
    """Price tables to read: each GPU takes the lowest price among them that lists it,
    and its candidate names the provider. Empty: the default basis, AWS on-demand list
    prices. A GPU none of them lists has no cloud price (``price_basis.unpriced``)."""

    kind: PriceKind = "on_demand"
    """``on_demand``; ``spot`` (interruptible capacity); ``reserved`` (a commitment: the
    candidate's price names its term)."""


class HybridSpec(Record, kw_only=True):
    """The owned pool + cloud burst comparison (deployment ``hybrid``)."""

    owned_gpu: GpuName = "rtx-4090-24gb"
    owned_count: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = 8
    burst_gpu: GpuName = "a100-sxm4-80gb"
    jobs_per_month: Annotated[float, msgspec.Meta(gt=0, le=1e6)] = 1.0
    """How often the request's job runs in a month (inference: ignored; its duration is the month)."""


class RecommendRequest(Record, kw_only=True):
    """Which GPU, how many, and what it costs, for one job."""

    model: ModelSpec
    workload: Workload
    runtime: Runtime = "cuda"
    layout: Layout = "search"
    """``search``: the search chooses the GPU count and layout (the workload's
    parallelism only fixes the global batch). ``given``: every candidate GPU is timed at
    exactly ``workload.parallelism`` (tensor x pipeline x data x context GPUs, the
    micro-batch and accumulation as given), and answers even when it does not fit."""

    objective: Objective = "balanced"
    constraints: Constraints = msgspec.field(default_factory=Constraints)
    pricing: Pricing = msgspec.field(default_factory=Pricing)
    """Which providers' prices a cloud cost uses (default: AWS on-demand); your own
    ``constraints.prices`` and a catalog file's negotiated prices win over them."""
    training: TrainingVolume | None = None
    """Training work (modes training, finetune_lora, finetune_qlora)."""

    inference: InferenceVolume | None = None
    """Serving work (mode inference); defaults apply when absent."""

    efficiency: Efficiency = msgspec.field(default_factory=Efficiency)
    measured_flops: Annotated[
        dict[GpuName, dict[CatalogPrecision, Annotated[float, msgspec.Meta(gt=0, le=1e18)]]],
        msgspec.Meta(max_length=64),
    ] = {}
    """Live-fleet measured dense FLOP/s per GPU (any lookup name) and catalog precision
    (``bf16``, ``fp8``, …); replaces the datasheet peak for that GPU (``source: measured``)."""

    hybrid: HybridSpec | None = None
    limit: Annotated[int, msgspec.Meta(ge=1, le=500)] = 50
    """Most recommendations returned."""

    all_counts: bool = False
    """Return every fitting GPU count, not only each GPU's best for the objective."""


# ---------------------------------------------------------------- response


class ParallelLayout(Record, kw_only=True):
    """How the job is split over its GPUs."""

    tensor: int
    pipeline: int
    data: int
    """Data-parallel ranks (inference: replicas)."""

    zero_stage: int
    cpu_offload_optimizer: bool = False
    context: int = 1
    expert: int = 1
    """Expert-parallel ranks, within the data-parallel ones."""

    virtual_stages: int = 1
    framework: Framework | None = None
    """The framework the time assumes (what its communication overlaps)."""

    micro_batch_size: int | None = None
    """Training: sequences per micro-batch on each data-parallel rank."""

    gradient_accumulation_steps: int | None = None
    global_batch_size: int | None = None
    """Training: sequences per optimizer step across the job (micro-batch x
    accumulation x data-parallel ranks)."""


class Throughput(Record, kw_only=True):
    """A plan's rate on all its GPUs together: training, the whole job's; serving, every
    replica's."""

    value: float
    unit: str
    """``tokens/s`` (trained, or generated for inference); ``samples/s`` for vision models."""


class StepTime(Record, kw_only=True):
    """Where one optimizer step's time goes (seconds, on the critical path)."""

    seconds: float
    compute_s: float
    """Model FLOPs (matmuls, attention), memory-bound kernels and kernel launches."""

    recompute_s: float
    """Activation recomputation (``gradient_checkpointing``)."""

    exposed_comm_s: float
    """Communication the framework does not hide behind compute."""

    bubble_s: float
    """Pipeline stages idle at the start and end of the step."""

    optimizer_s: float


ConcurrencyLimit = Literal[
    "kv_cache",
    "max_concurrency",
    "token_budget",
    "batch_size",
    "max_time_to_first_token_s",
    "max_time_per_output_token_s",
    "slo.tpot_p95_s",
]

LatencyKind = Literal["steady_state", "static_batch"]


class Percentiles(Record, kw_only=True):
    """A latency's 50th, 95th and 99th percentiles over arriving requests."""

    p50: float
    p95: float
    p99: float


class UnderLoad(Record, kw_only=True):
    """One replica under Poisson arrivals at its share of the request rate: the queueing
    model of the engine's scheduler (``core/perf/queueing.py``, docs/serving.md)."""

    requests_per_s: float
    """Arrivals per second at this replica (the request rate over the replicas)."""

    utilization: float
    """Arrivals over the rate at which the replica's queue grows without bound."""

    mean_in_flight: float
    """Sequences an arriving request finds in flight, on average."""

    wait_probability: float
    """Chance an arrival finds every slot (``concurrency``) taken and queues for one."""

    time_to_first_token_s: Percentiles
    """From arrival to the first token: the wait for a slot, the rest of the step in
    progress, and the prompt's chunks, each beside the decodes in flight."""

    time_per_output_token_s: Percentiles
    """A request's time from its first token to its last over its output tokens after
    the first (as vLLM's ``benchmark_serving`` reports TPOT)."""


class Latency(Record, kw_only=True):
    """One serving replica at the planned concurrency: the saturated steady state (or a
    static batch), and its percentiles under the request rate."""

    kind: LatencyKind = "steady_state"
    """What ``time_to_first_token_s`` and ``time_per_output_token_s`` are.
    ``steady_state``: one arriving request's, at ``concurrency`` sequences in flight
    (queueing aside; the queue is in ``under_load``). ``static_batch``: an explicit
    ``workload.batch_size`` whose sequences start together, so the first token of every
    one waits for the whole batch's prefill."""

    concurrency: int
    """Sequences the replica keeps in flight (continuous batching)."""

    limited_by: ConcurrencyLimit
    """What stops the concurrency growing: the KV cache left after the weights, the
    server's sequence cap, its token budget per step (decodes and the prompt chunks of
    arriving requests must fit it), an explicit ``batch_size``, or a latency target."""

    kv_cache_sequences: int | None
    """Sequences the paged KV cache holds at their mean length (prompt + half the output)."""

    time_to_first_token_s: float
    time_per_output_token_s: float
    request_latency_s: float
    """Time to first token plus the output tokens at the time per output token."""

    output_tokens_per_s: float
    """Output tokens per second of one replica."""

    requests_per_s: float
    """Requests per second one replica completes."""

    decode_bound: str
    under_load: UnderLoad | None = None
    """Percentiles under ``inference.requests_per_second`` spread over the replicas;
    None without a rate, for a static batch, or past what the replicas can serve."""

    max_requests_per_s_within_slo: float | None = None
    """The highest arrival rate one replica serves with ``inference.slo``'s p95s held
    (None without ``slo``)."""


class KubernetesResources(Record, kw_only=True):
    """The container resources of one replica's pod: its GPUs (a GPU is an extended
    resource, asked for in ``limits``; Kubernetes sets the request equal). Memory and CPU
    are left to you: no engine states what its host process needs."""

    limits: dict[str, str]


class Launch(Record, kw_only=True):
    """How to run a serving plan: the engine's command for one replica, how many
    replicas, and what each asks of Kubernetes. Every value the plan relied on is a flag,
    so the server sizes its cache as the plan did."""

    engine: Engine
    engine_version: str | None
    """``inference.engine_version`` as given (None: the version the source is of)."""

    source: str
    """The engine source the flags and the memory rule were read from (file, version or
    commit)."""

    command: list[str]
    """The command line, one argument per item."""

    shell: str
    """``command`` quoted for a POSIX shell."""

    replicas: int
    tensor_parallel: int
    """Tensor-parallel GPUs of one replica (of each attention rank, with ``data_parallel``)."""

    data_parallel: int = 1
    """Data-parallel attention ranks of one replica (vLLM ``--data-parallel-size``, SGLang
    ``--dp-size --enable-dp-attention``): each keeps its own sequences and their KV cache;
    the replica has ``tensor_parallel`` x ``data_parallel`` GPUs."""

    expert_parallel: int = 1
    """GPUs the routed experts are split over (vLLM ``--enable-expert-parallel``, SGLang
    ``--ep-size``, TensorRT-LLM ``--ep_size``); 1: experts sharded by tensor parallelism
    like the other layers."""

    max_model_len: int
    """The longest sequence the command lets the engine accept (``--max-model-len`` …)."""

    max_concurrency: int
    """Sequences in flight the command allows one replica (``--max-num-seqs`` …)."""

    memory_fraction: float | None
    """The engine's memory share the command sets (``--gpu-memory-utilization`` …);
    None for an engine without one."""

    kv_cache_bytes_per_gpu: int
    """KV cache the engine's rule leaves on each GPU of a replica (0 when not known)."""

    kv_cache_tokens: int
    """Tokens that KV cache holds, all the replica's sequences together (each GPU holds
    its share of every token's keys and values), in whole blocks."""

    resources: KubernetesResources
    config_files: dict[str, str] = {}
    """Files the command names, by name, with their content: TensorRT-LLM's ``--config``
    YAML of the LLM API options that no flag sets (``enable_attention_dp`` for expert
    parallelism). Write each beside the command (a ConfigMap in Kubernetes)."""

    notes: list[str] = []
    """What the command does not pin, and why."""


class Breach(Record, kw_only=True):
    """A constraint a plan misses, and by how much."""

    constraint: str
    """The request field it misses (``constraints.max_gpus_per_job``,
    ``inference.max_time_per_output_token_s``, …), or ``memory`` for a plan that does not fit."""

    actual: float | None
    """The plan's value; None when it is unknown (no price to check a budget against)."""

    limit: float
    unit: str
    factor: float
    """How many times off the plan is (at least 1; an unknown value counts as 10): plans
    that miss are ranked by the product of their factors."""

    detail: str


class PriceUsed(Record, kw_only=True):
    """The price per GPU-hour a candidate's cost uses, and where it comes from."""

    usd_per_gpu_hour: float
    provider: str
    """A price table (``aws``, ``runpod``, …); ``request`` for ``constraints.prices``;
    ``catalog_file`` for a negotiated price in the catalog file; ``owned`` for the
    on-premises price (purchase amortized, plus electricity)."""

    kind: PriceKind | None = None
    """A price table's kind: ``on_demand``, ``spot`` or ``reserved``."""

    term: str | None = None
    """The commitment of a ``reserved`` price."""

    instance: str | None = None
    """What the table priced (the instance type, divided by its GPUs)."""

    as_of: datetime.date | None = None
    """The day the price was read (of the purchase price, for ``owned``)."""

    source: str | None = None
    """Where it was read: the source's title and address."""


class PriceBasis(Record, kw_only=True):
    """The prices this answer compares: one basis, the same for every candidate."""

    providers: list[ProviderId]
    """The price tables read (the request's ``pricing.providers``, else the default)."""

    kind: PriceKind
    default: bool
    """True when the request named no providers: the default basis, AWS on-demand."""

    detail: str
    """The basis in words, with what wins over it."""

    unpriced: list[str]
    """Candidate GPUs that no table of the basis lists and no override prices: they
    have no cloud cost, and under ``cheapest`` and ``balanced`` they are ranked after
    every priced plan, unscored."""


IntervalFigure = Literal[
    "throughput",
    "time_hours",
    "cost_usd",
    "energy_kwh",
    "mfu",
    "time_to_first_token_s",
    "time_per_output_token_s",
    "ttft_p50_s",
    "tpot_p50_s",
]


class Candidate(Record, kw_only=True):
    """One GPU model at one count."""

    gpu: str
    """Catalog id."""

    name: str
    count: int
    fits: bool
    layout: ParallelLayout | None
    required_bytes_per_gpu: int
    """Training, and a plan that does not fit: the estimator's ``required_bytes`` (with its
    95% high end of the device bytes) for one GPU of the layout. Serving: what one GPU of a replica holds at
    the planned concurrency (weights, runtime, and the KV cache of its sequences in flight
    at their mean length), within the server's share of the GPU."""

    usable_memory_bytes: int
    memory_utilization: float
    throughput: Throughput | None
    time_hours: float | None
    """Training: wall-clock time of the job (its evaluations included). Inference: the
    period planned for."""

    evaluation_hours: float | None = None
    """Training with ``training.evaluation``: the hours of ``time_hours`` its evaluations
    take, each a forward pass over the evaluation tokens on this layout."""

    usd_per_hour: float | None
    cost_usd: float | None
    cost_basis: Literal["cloud", "on_prem"] | None
    price: PriceUsed | None = None
    """The price per GPU-hour behind ``usd_per_hour`` and ``cost_usd``: its provider,
    kind, date and source; None when no price covers this GPU."""

    energy_kwh: float | None
    flops_per_watt: float | None
    """Delivered model FLOP/s per watt of board power."""

    mfu: float | None = None
    """Model FLOPs utilization: model FLOPs (6N plus attention, no recomputation) per
    second over the GPUs' dense peak of the precision the matmuls run in."""

    step: StepTime | None = None
    """Training: one optimizer step, split into compute, recompute, exposed
    communication, pipeline bubble and optimizer."""

    latency: Latency | None = None
    launch: Launch | None = None
    """Serving: the engine's command for one replica, the replicas, and each one's
    Kubernetes resources."""

    disaggregation: Disaggregation | None = None
    """Serving, with ``inference.compare_disaggregated``: this plan against prefill and
    decode pools (xPyD) of the same GPU for the same targets and rate, and the winner."""

    source: Literal["catalog", "measured"] = "catalog"
    """Where the FLOP/s came from: datasheet peak × MFU, or the fleet's measurement × MFU."""

    kernel_source: Literal["measured", "roofline"] | None = None
    """What timed the GEMMs and attention: ``measured``, a kernel table measured on this
    GPU (NVIDIA AIConfigurator's data, interpolated; ``kernel_table`` names it), or
    ``roofline``, the datasheet peak at the GPU generation's fitted efficiencies (GPUs
    without a table, fp32 and weight-only quantized paths, vision models, a request's
    ``efficiency.mfu``). None for a plan that was not timed."""

    kernel_table: str | None = None
    """With ``kernel_source: measured``: the table's provenance id (package, version, GPU,
    engine and engine version; the file and its collection metadata are in
    ``gpuplan/core/perf/data/kernels``)."""

    score: float | None
    """Objective score in [0, 1]: 1 for the best plan; 0 when it misses a constraint (or
    does not fit). None under ``cheapest`` and ``balanced`` for a plan with no price on
    the basis: such plans are ranked after every priced one, by GPU-hours (``cheapest``)
    or time (``balanced``), never scored against priced plans."""

    reasons: list[str]
    breaches: list[Breach] = []
    """The constraints this plan misses (empty for a plan that meets them all)."""

    unverified: list[str] = []
    """Inputs of this plan that are not confirmed by a primary source."""

    intervals: dict[IntervalFigure, Interval] = {}
    """80% prediction intervals of the predicted figures (``throughput``, ``time_hours``,
    ``cost_usd``, ``energy_kwh``, ``mfu``; serving: ``time_to_first_token_s``,
    ``time_per_output_token_s``, and under a request rate ``ttft_p50_s`` and
    ``tpot_p50_s``, the p50s of ``latency.under_load``: the step time's error and the
    queueing model's at the replica's load, docs/serving.md): the measured figure falls
    between ``low`` and ``high`` in 8 cases of 10, judged by the speed model's
    leave-one-source-out errors on published runs of the same regime (framework, GPU
    generation, scale, precision), widened where no published run is like this one
    (``reasons`` says why). Empty for a plan that does not fit."""


class Scenario(Record, kw_only=True):
    """Where the workload sits in the seed guide's scenario matrix."""

    class_: Literal[
        "light_inference",
        "medium_training",
        "large_distributed_training",
        "supercomputing_research",
    ] = msgspec.field(name="class")
    required_bytes: int
    """One-GPU, unsharded ``required_bytes`` the class is chosen by."""

    band: str
    hardware_class: list[str]
    cost_effectiveness: str
    rule: str


class Advice(Record, kw_only=True):
    """One change that makes the job fit (or fit better) on a GPU, with its effect.

    The list is ranked: changes that make the job fit first, those that keep the job
    (not LoRA or QLoRA) before those that change it; then, among fitting changes, the
    fewest GPU-hours first, and among the others the most memory saved first."""

    change: str
    gpu: str
    """Catalog id of the GPU the change is sized on (the answer's ``advice_gpu``)."""

    count: int
    required_bytes_before: int
    """``required_bytes`` of the job as asked, unsharded on one GPU."""

    required_bytes_after: int
    """``required_bytes`` per GPU with the change, on ``count`` GPUs."""

    fits_after: bool
    time_factor: float | None
    """Job time after / before on this GPU (1.33 = 33% slower); None when not timed."""

    gpu_hours_factor: float | None
    """GPU-hours after / before: ``time_factor`` x ``count``, what the change costs."""

    detail: str
    """What the change is and what it costs beyond the figures (which are the fields)."""


class HybridOption(Record, kw_only=True):
    """One way to pay for a month of the work: all cloud, all on-premises, or the owned
    pool with the rest burst to the cloud."""

    name: Literal["all_cloud", "all_on_prem", "hybrid"]
    monthly_usd: float | None
    """USD per month; None when a fitting plan or a price it needs is missing (``detail``
    says which)."""

    detail: str
    """How the figure is made up, or what is missing."""


class HybridComparison(Record, kw_only=True):
    """The owned pool + cloud burst comparison: a month of the job's work priced all
    cloud, all on-premises and hybrid, and the utilization at which owning pays."""

    owned_gpu: str
    """Catalog id of the owned GPU."""

    burst_gpu: str
    """Catalog id of the cloud GPU the work bursts to."""

    owned_gpu_hours_per_month: float | None
    """Work of a month in owned-GPU hours."""

    burst_gpu_hours_per_month: float | None
    """The same work in burst-GPU hours."""

    options: list[HybridOption]
    break_even_utilization: float | None
    """Busy share of the month above which an owned GPU beats renting the same work."""

    detail: str


class SearchStats(Record, kw_only=True):
    """How much the search did."""

    gpus: int
    """Candidate GPUs (the catalog after ``include``, ``exclude`` and ``vendors``)."""

    plans_considered: int
    """Plans the search compared across those GPUs."""

    estimates: int
    """Memory estimates run (the search stops at a fixed bound)."""


class RecommendResponse(Record, kw_only=True):
    """The answer of ``POST /v1/recommendations``: each candidate GPU's best plan ranked
    for the objective, with the scenario class, advice and the hybrid comparison."""

    objective: Objective
    workload_kind: Literal["training", "inference"]
    recommendations: list[Candidate]
    """At most ``limit``, best first: the scored plans, then (under ``cheapest`` and
    ``balanced``) the unpriced ones, unscored; GPUs with no plan that meets the
    constraints come last, at score 0."""

    price_basis: PriceBasis
    """Whose prices the costs compare."""

    scenario: Scenario
    advice: list[Advice]
    advice_gpu: str | None
    """Catalog id of the GPU the advice is for: ``constraints.preferred_gpu``, else the
    top recommendation's GPU (``assumptions`` says which). No advice for it means the job
    fits one of it as asked."""

    hybrid: HybridComparison | None
    """None unless ``constraints.deployment`` is ``hybrid`` or the request has ``hybrid``."""

    assumptions: list[str]
    unverified: list[str]
    warnings: list[str]
    search: SearchStats
