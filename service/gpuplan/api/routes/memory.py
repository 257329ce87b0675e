"""Memory planning over HTTP: the analytic estimate and the built-in model presets."""

from typing import Any

from litestar import Request

from gpuplan.api.answers import Encoded
from gpuplan.api.compute import bounded
from gpuplan.api.routing import operation
from gpuplan.api.runtime import runtime
from gpuplan.core.memory.estimate import estimate
from gpuplan.core.memory.presets import ModelList, model_list
from gpuplan.core.memory.schema import EstimateRequest, EstimateResponse


@operation(
    "POST",
    "/v1/memory/estimate",
    body=EstimateRequest,
    problems=(503,),
    tags=["memory"],
    remember=True,
)
async def estimate_memory(
    request: Request[Any, Any, Any], body: EstimateRequest
) -> Encoded[EstimateResponse]:
    """Estimate the peak GPU memory of a training, fine-tuning or inference job.

    The model is a Hugging Face `config.json` (`hf_config`, read offline), a built-in
    preset (`name`, see `GET /v1/models`) or a bare `parameters` count. The answer is
    per GPU, by the tool that reads it: `peak_bytes` (tensors and cuBLAS workspaces at
    the peak: `torch.cuda.max_memory_allocated`), `reserved_bytes` (the caching allocator's
    segments: `torch.cuda.max_memory_reserved`), `device_bytes` (what `nvidia-smi`
    shows: plus the CUDA context and NCCL buffers) and `required_bytes` (`device_bytes`
    plus the headroom of its 90% interval's high end: fits at 95% confidence), with the breakdown at the peak and the assumptions
    made. With `gpu`, a fit verdict is added.
    """
    # Inline: the schema bounds an estimate to milliseconds (4,096 layers at most; the
    # worst case measured, an alternating-MoE 4,096-layer training step, takes 11 ms).
    return await bounded(request, estimate, body, runtime(request).catalog, inline=True)


@operation("GET", "/v1/models", tags=["memory"])
async def list_models(request: Request[Any, Any, Any]) -> ModelList:
    """List the built-in model presets with their parameter counts and sources."""
    return model_list()
