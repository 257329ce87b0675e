"""Byte widths of a step's tensors, from the precision and the runtime."""

from gpuplan.core.memory.schema import Precision, Runtime
from gpuplan.core.record import Record


class Numerics(Record, kw_only=True):
    """How many bytes each kind of tensor takes."""

    param: int
    """Parameters as the model holds them (fp32 under autocast)."""

    grad: int
    """Gradients: the dtype of the parameters."""

    matmul: int
    """Outputs of matmuls and everything computed from them."""

    residual: int
    """The residual stream between layers (fp32 under autocast: fp32 + bf16 promotes)."""

    amp: bool
    """Autocast: every linear saves its own low-precision copy of an fp32 input."""

    saved_linear_input: float
    """Bytes per element a linear saves of its input (fp8 recipes keep an fp8 copy)."""

    dropout_mask: float
    """Bytes per element of a saved dropout mask: CUDA's fused kernel keeps a bool; the
    CPU path multiplies by a noise tensor of the activation dtype."""

    cpu: bool
    """CPU kernels (for ``runtime: cpu``), whose temporaries differ from CUDA's."""


_WIDTH = {"fp32": 4, "fp16": 2, "bf16": 2, "amp_fp16": 2, "amp_bf16": 2, "fp8": 2}

DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1}
"""Bytes per element of each dtype a request names for stored tensors (the KV cache,
the gradients' reduce dtype)."""

FP32 = DTYPE_BYTES["fp32"]
"""Bytes of an fp32 element: what norms, softmaxes, losses and upcasts keep whatever
the precision."""


def half_dtype(precision: Precision) -> str:
    """The 16-bit dtype a precision computes in (bf16 unless it names fp16)."""
    return "fp16" if precision in ("fp16", "amp_fp16") else "bf16"


def numerics_for(precision: Precision, runtime: Runtime) -> Numerics:
    amp = precision.startswith("amp_")
    matmul = _WIDTH[precision]
    return Numerics(
        param=4 if amp or precision == "fp32" else 2,
        grad=4 if amp or precision == "fp32" else 2,
        matmul=matmul,
        residual=4 if amp else matmul,
        amp=amp,
        saved_linear_input=1.0 if precision == "fp8" else float(matmul),
        dropout_mask=float(matmul) if runtime == "cpu" else 1.0,
        cpu=runtime == "cpu",
    )
