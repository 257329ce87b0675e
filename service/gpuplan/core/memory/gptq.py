"""AutoGPTQ's exllama kernels: the scratch buffers they keep on every GPU.

Hugging Face loads a GPTQ checkpoint through optimum and AutoGPTQ, and transformers'
``GPTQConfig`` picks the exllama kernel for 4-bit weights unless told otherwise
(transformers 4.38.2 and 4.46.0, utils/quantization_config.py: ``self.use_exllama =
True`` and ``self.exllama_config = {"version": ExllamaVersion.ONE}``). After loading,
AutoGPTQ's ``autogptq_post_init`` (AutoGPTQ v0.7.1,
b2e918c9968ea46796acc87d801121dd25c9301e, auto_gptq/modeling/_utils.py) allocates on
each device, once for all layers, the buffers the kernels dequantize into. They live as
long as the model (``model.device_to_buffers``: "Buffers need to be persistent to
avoid any bug"), so ``torch.cuda.max_memory_allocated`` counts them whatever the prompt.
"""

from gpuplan.core.memory.architecture import Architecture
from gpuplan.core.memory.modules import linear_modules
from gpuplan.core.memory.schema import Workload

FP16 = 2
"""Both kernels' buffers are ``torch.float16``."""

EXLLAMA_V2_MAX_INPUT_LEN = 2048
EXLLAMA_V2_MAX_BATCH_SIZE = 8
"""``QuantLinear.scratch_space_fixed(self, max_input_len=2048, max_batch_size=8)``
(auto_gptq/nn_modules/qlinear/qlinear_exllamav2.py, v0.7.1), which
``autogptq_post_init`` calls without arguments."""


def _shapes(arch: Architecture, w: Workload) -> list[tuple[int, int]]:
    """(in, out) features of every quantized linear: the layers' (and the head's only
    when it is quantized too)."""
    return [
        (m.in_features, m.out_features)
        for name, m in linear_modules(arch).items()
        if m.per_layer > 0 or (w.quantize_lm_head and not arch.tie_word_embeddings)
    ]


def exllama_buffer_bytes(arch: Architecture, w: Workload) -> float:
    """The scratch of ``gptq_kernel`` on one GPU (0 for ``none``).

    ``exllama`` (v1): ``temp_dq = torch.zeros((1, max_dq_buffer_size),
    dtype=torch.float16)`` with ``max_dq_buffer_size`` the largest ``qweight.numel() *
    8`` (in × out: 8 weights per int32), and ``temp_state = torch.zeros((max_input_len,
    max_inner_outer_dim), dtype=torch.float16)``, one row without act-order
    (``max_input_len = 1``; ``desc_act`` checkpoints, which reorder inputs through it,
    take 2,048: not modelled). 130 MiB for Qwen2-7B's 3,584 × 18,944 MLP.
    ``exllamav2``: one ``ExLlamaV2DeviceTensors`` scratch of the largest
    ``scratch_space_fixed()``: ``temp_dq_size() = in * out * 2 + 128`` plus
    ``temp_fwd_size(2048, 8) = out * 2048 * 8 * 4 + 128`` bytes.
    """
    if w.gptq_kernel == "none":
        return 0.0
    shapes = _shapes(arch, w)
    if w.gptq_kernel == "exllama":
        temp_dq = max(i * o for i, o in shapes) * FP16
        temp_state = max(max(i, o) for i, o in shapes) * FP16
        return float(temp_dq + temp_state)
    fwd = EXLLAMA_V2_MAX_INPUT_LEN * EXLLAMA_V2_MAX_BATCH_SIZE * 4
    return float(max(i * o * 2 + 128 + o * fwd + 128 for i, o in shapes))
