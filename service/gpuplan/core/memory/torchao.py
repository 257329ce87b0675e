"""torchao weight-only quantization applied after the whole model is loaded.

torchao's generate script (pytorch/ao torchao/_models/llama/generate.py at
61fef69dd02e566cfb1be3d268c96d84b23b6af9, the runs behind pytorch/ao issue #346) builds the model in bf16 on the GPU
(``model.load_state_dict(checkpoint, assign=True)``, ``model.to(device=device,
dtype=precision)``) and only then swaps every ``nn.Linear`` weight for a quantized
tensor subclass (``change_linear_weights_to_int8_woqtensors`` /
``..._int4_woqtensors``, which call ``quantize(model, get_apply_int8wo_quant())`` and
``get_apply_int4wo_quant(groupsize, inner_k_tiles)``; torchao/quantization/
quant_api.py). So the peak is not the quantized model's:

* the 16-bit model is resident until its weights are quantized one by one, and the
  caching allocator keeps every freed 16-bit block reserved afterwards (nothing calls
  ``empty_cache``);
* each weight's quantization (``AffineQuantizedTensor.from_float``,
  torchao/dtypes/aqt.py; ``choose_qparams_affine``/``quantize_affine``,
  torchao/quantization/quant_primitives.py) makes full-size temporaries. The weights
  are ``nn.Parameter``s that require grad and the script quantizes outside
  ``torch.no_grad``, so autograd keeps what each op saves for a backward that never
  comes until the expression's result dies: ``clamp`` keeps its input, the division
  its numerator, ``amin`` the (padded) weight. torchao's ``detach`` of the new
  parameter drops that graph afterwards.

The recipes below are those sequences, request by request, in bytes per weight
element (``compute``: the model's dtype, ``int32``: 4, ``stored``: the quantized
format); ``tests/test_memory_torchao.py`` replays the same torch ops on CPU and checks
the live bytes they reach. The largest weights (the output head: Llama-3's 525 M
elements) make the largest temporaries, which no freed layer block can hold: fresh
segments on top of the 16-bit model's.
"""

from typing import Literal

Op = Literal["alloc", "free"]
Kind = Literal["compute", "int32", "stored"]
RecipeStep = tuple[Op, str, Kind | None]

INT8_RECIPE: tuple[RecipeStep, ...] = (
    # quantize_affine, ZeroPointDomain.INT: torch.clamp(torch.round(input * (1.0 /
    # scale)) + zero_point, quant_min, quant_max).to(torch.int8)
    ("alloc", "scaled", "compute"),  # input * (1 / scale): mul saves its inputs only
    ("alloc", "rounded", "compute"),
    ("free", "scaled", None),
    ("alloc", "shifted", "compute"),  # + zero_point (bf16 + int64 stays bf16)
    ("free", "rounded", None),
    ("alloc", "clamped", "compute"),  # clamp saves its input ("shifted")
    ("alloc", "out", "stored"),  # .to(torch.int8), with the per-row scales
    ("free", "clamped", None),
    ("free", "shifted", None),
)
"""int8 weight-only: per-channel symmetric (``get_apply_int8wo_quant``)."""

INT4_RECIPE: tuple[RecipeStep, ...] = (
    # from_float pads to the tensor-core tile (a copy even when nothing is added:
    # constant_pad_nd clones), and amin/amax save it for backward.
    ("alloc", "padded", "compute"),
    # quantize_affine, ZeroPointDomain.FLOAT: torch.clamp(torch.round((input -
    # min_val) / scale), quant_min, quant_max).to(torch.int32)
    ("alloc", "shifted", "compute"),  # the division saves it
    ("alloc", "scaled", "compute"),
    ("alloc", "rounded", "compute"),
    ("free", "scaled", None),
    ("alloc", "clamped", "compute"),  # clamp saves "rounded"
    ("alloc", "int32", "int32"),  # .to(torch.int32)
    ("free", "clamped", None),
    ("free", "rounded", None),
    ("free", "shifted", None),
    # TensorCoreTiledAQTLayout.from_plain: aten._convert_weight_to_int4pack and
    # pack_tinygemm_scales_and_zeros
    ("alloc", "out", "stored"),
    ("free", "int32", None),
    ("free", "padded", None),
)
"""int4 weight-only: asymmetric groups, tinygemm's tensor-core tiled layout
(``get_apply_int4wo_quant``)."""

RECIPES = {"int8": INT8_RECIPE, "int4": INT4_RECIPE}

Steps = tuple[tuple[str, str, float], ...]
"""A recipe with each request's bytes per weight element resolved."""


def quantize_steps(fmt: str, *, compute_bytes: float, stored_bytes: float) -> Steps:
    """``fmt``'s recipe in bytes per element of the weight being quantized."""
    sizes = {"compute": compute_bytes, "int32": 4.0, "stored": stored_bytes}
    return tuple((op, slot, sizes[kind] if kind else 0.0) for op, slot, kind in RECIPES[fmt])


def peak_per_element(steps: Steps) -> float:
    """The most bytes per weight element the recipe holds at once (its output included)."""
    live: dict[str, float] = {}
    top = 0.0
    for op, slot, size in steps:
        if op == "alloc":
            live[slot] = size
            top = max(top, sum(live.values()))
        else:
            del live[slot]
    return top


def loading_peak(
    *,
    weights: float,
    quantized_elements: float,
    largest_layer_elements: float,
    head_elements: float,
    compute_bytes: float,
    stored_bytes: float,
    steps: Steps,
) -> float:
    """Bytes allocated at the worst moment of quantizing after a full load.

    Either the first large layer weight, while every other weight is still 16-bit,
    or the head, quantized last (module order) when every layer is already quantized
    but its own temporaries are the largest. ``weights`` are the quantized model's
    bytes on this GPU; ``quantized_elements`` the weights it quantizes, the head's
    included.
    """
    per = peak_per_element(steps)
    full = weights + quantized_elements * (compute_bytes - stored_bytes)
    first = full + per * largest_layer_elements
    head = weights + head_elements * (compute_bytes - stored_bytes + per)
    return max(first, head if head_elements else 0.0)
