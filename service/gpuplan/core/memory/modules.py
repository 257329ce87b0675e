"""The linear modules of each architecture, by their Hugging Face names: what LoRA adapts.

PEFT matches a ``target_modules`` entry against every module's qualified name (an
exact name, or one ending in ``.`` + the entry) and raises when none matches; a
misspelt name beside a valid one it ignores. Here every entry must name a linear
module the architecture has (its last dotted part, so ``mlp.c_proj`` is GPT-2's MLP
projection), and one that does not is refused with the names that exist, so a
request cannot silently train fewer adapters than it says. Without targets, PEFT's
default for the model type applies (``TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING``
in src/peft/utils/constants.py, huggingface/peft commit 00073fe); a type with no
default there is refused by PEFT ("Please specify `target_modules`"), and here too.
"""

from gpuplan.core.memory.architecture import Architecture
from gpuplan.core.memory.errors import InvalidModel
from gpuplan.core.record import Record

PATH = "$.workload.lora.target_modules"

PEFT_DEFAULT_TARGETS: dict[str, tuple[str, ...]] = {
    "llama": ("q_proj", "v_proj"),
    "mistral": ("q_proj", "v_proj"),
    "mixtral": ("q_proj", "v_proj"),
    "gemma": ("q_proj", "v_proj"),
    "gemma2": ("q_proj", "v_proj"),
    "qwen2": ("q_proj", "v_proj"),
    "qwen3": ("q_proj", "v_proj"),
    "gemma3_text": ("q_proj", "v_proj"),
    "opt": ("q_proj", "v_proj"),
    "gpt2": ("c_attn",),
    "gpt_bigcode": ("c_attn",),
    "gpt_neox": ("query_key_value",),
    "falcon": ("query_key_value",),
    "bert": ("query", "value"),
    "roberta": ("query", "value"),
}


class Linear(Record, kw_only=True):
    """One linear module of a layer (or of the head): its shape and how many a layer has."""

    in_features: int
    out_features: int
    per_layer: int = 1
    """Modules of this name in one layer (GPT-2 has two ``c_proj``; 0: not in layers)."""

    attention: bool = True
    """In the attention half of the layer (its backward runs second)."""

    in_out_total: int = 0
    """When modules of one name differ in shape (GPT-2's two ``c_proj``, BERT's three
    ``dense``, DeepSeek's dense and shared-expert MLPs): in + out summed over every one
    of them in the model. 0: ``per_layer`` × layers of the shape above."""

    inner: bool = False
    """Reads a tensor made inside its half of the layer (the attention output, the MLP's
    hidden state), not a norm's output: a row-parallel linear under tensor parallelism.
    Modules of one name in both places (GPT-2's ``c_proj``, BERT's ``dense``) say so."""

    in_per_layer: int = 0
    """When modules of one name differ in shape: their input features summed over one
    layer (what their adapters read). 0: ``per_layer`` × ``in_features``."""

    @property
    def inputs(self) -> int:
        """Input features of this name's modules in one layer, summed."""
        return self.in_per_layer or self.per_layer * self.in_features


def _llama_attention(arch: Architecture) -> dict[str, Linear]:
    h, q, kv = arch.hidden_size, arch.q_dim, arch.kv_dim
    if arch.mla is not None:
        m = arch.mla
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        attn = {
            "kv_a_proj_with_mqa": Linear(
                in_features=h, out_features=m.kv_lora_rank + m.qk_rope_head_dim
            ),
            "kv_b_proj": Linear(
                inner=True,
                in_features=m.kv_lora_rank,
                out_features=arch.num_heads * (m.qk_nope_head_dim + m.v_head_dim),
            ),
            "o_proj": Linear(in_features=arch.num_heads * m.v_head_dim, out_features=h, inner=True),
        }
        if m.q_lora_rank:
            attn["q_a_proj"] = Linear(in_features=h, out_features=m.q_lora_rank)
            attn["q_b_proj"] = Linear(
                in_features=m.q_lora_rank, out_features=arch.num_heads * qk, inner=True
            )
        else:
            attn["q_proj"] = Linear(in_features=h, out_features=arch.num_heads * qk)
        return attn
    if arch.model_type == "phi3":
        return {
            "qkv_proj": Linear(in_features=h, out_features=q + 2 * kv),
            "o_proj": Linear(in_features=q, out_features=h, inner=True),
        }
    return _projections(h, q, kv)


def _projections(
    h: int,
    q: int,
    kv: int,
    names: tuple[str, str, str, str] = ("q_proj", "k_proj", "v_proj", "o_proj"),
) -> dict[str, Linear]:
    """Separate query, key, value and output projections, under the family's names."""
    query, key, value, out = names
    return {
        query: Linear(in_features=h, out_features=q),
        key: Linear(in_features=h, out_features=kv),
        value: Linear(in_features=h, out_features=kv),
        out: Linear(in_features=q, out_features=h, inner=True),
    }


def _plain(h: int, f: int, names: tuple[str, str]) -> dict[str, Linear]:
    """A two-linear MLP (up to ``f``, back to ``h``), under the family's names."""
    up, down = names
    return {
        up: Linear(in_features=h, out_features=f, attention=False),
        down: Linear(in_features=f, out_features=h, attention=False, inner=True),
    }


def _gated(h: int, f: int) -> dict[str, Linear]:
    return {
        "gate_proj": Linear(in_features=h, out_features=f, attention=False),
        "up_proj": Linear(in_features=h, out_features=f, attention=False),
        "down_proj": Linear(in_features=f, out_features=h, attention=False, inner=True),
    }


def _llama_mlp(arch: Architecture) -> dict[str, Linear]:
    h, f = arch.hidden_size, arch.intermediate_size
    moe = arch.moe
    if moe is not None:
        # transformers 5 stores routed experts as fused parameters, not linear modules;
        # PEFT still targets them (``experts``) and the router (``gate``). A shared
        # expert, Qwen2-MoE's gate on it and DeepSeek's dense first layers are linears.
        layers = arch.num_layers
        dense = min(moe.dense_layers, layers)
        shared = moe.shared_intermediate_size
        mlp: dict[str, Linear] = {
            "gate": Linear(in_features=h, out_features=moe.num_experts, attention=False),
            "experts": Linear(
                in_features=h,
                out_features=moe.expert_intermediate_size,
                attention=False,
                in_out_total=moe.num_experts
                * (layers - dense)
                * (3 * h + 3 * moe.expert_intermediate_size),
            ),
        }
        if shared or dense:
            for name, (i, o) in {
                "gate_proj": (h, 0),
                "up_proj": (h, 0),
                "down_proj": (0, h),
            }.items():
                width_dense, width_shared = f, shared
                total = dense * (i or width_dense) + dense * (o or width_dense)
                if shared:
                    total += (layers - dense) * ((i or width_shared) + (o or width_shared))
                mlp[name] = Linear(
                    in_features=i or f,
                    out_features=o or f,
                    attention=False,
                    in_out_total=total,
                    inner=name == "down_proj",
                )
        if moe.shared_expert_gate:
            mlp["shared_expert_gate"] = Linear(in_features=h, out_features=1, attention=False)
        return mlp
    if arch.model_type == "phi3":
        return {
            "gate_up_proj": Linear(in_features=h, out_features=2 * f, attention=False),
            "down_proj": Linear(in_features=f, out_features=h, attention=False, inner=True),
        }
    return _gated(h, f)


def linear_modules(arch: Architecture) -> dict[str, Linear]:
    """Every linear module name of ``arch`` with its shape (experts stored as fused
    tensors, as transformers 5 stores them, are parameters, not modules)."""
    h, q, kv = arch.hidden_size, arch.q_dim, arch.kv_dim
    f = arch.intermediate_size
    family = arch.family
    head = {"lm_head": Linear(in_features=h, out_features=arch.vocab_size, per_layer=0)}
    if family == "llama":
        return {**_llama_attention(arch), **_llama_mlp(arch), **head}
    if family == "gpt2":
        layers = arch.num_layers
        return {
            "c_attn": Linear(in_features=h, out_features=q + 2 * kv),
            # attn.c_proj (h -> h) and mlp.c_proj (f -> h)
            "c_proj": Linear(
                in_features=h,
                out_features=h,
                per_layer=2,
                inner=True,
                in_out_total=layers * (3 * h + f),
                in_per_layer=h + f,
            ),
            "c_fc": Linear(in_features=h, out_features=f, attention=False),
            **head,
        }
    if family in ("neox", "falcon"):
        return {
            "query_key_value": Linear(in_features=h, out_features=q + 2 * kv),
            "dense": Linear(in_features=q, out_features=h, inner=True),
            **_plain(h, f, ("dense_h_to_4h", "dense_4h_to_h")),
            **head,
        }
    if arch.model_type == "starcoder2":
        return {**_projections(h, q, kv), **_plain(h, f, ("c_fc", "c_proj")), **head}
    if family == "opt":
        names = ("q_proj", "k_proj", "v_proj", "out_proj")
        return {**_projections(h, h, h, names), **_plain(h, f, ("fc1", "fc2")), **head}
    # BERT/RoBERTa: attention.output (h -> h), intermediate (h -> f) and output (f -> h)
    # are all `dense`, and so is the MLM head's transform (h -> h).
    return {
        "query": Linear(in_features=h, out_features=h),
        "key": Linear(in_features=h, out_features=h),
        "value": Linear(in_features=h, out_features=h),
        "dense": Linear(
            in_features=h,
            out_features=h,
            per_layer=3,
            inner=True,
            in_out_total=arch.num_layers * (4 * h + 2 * f) + 2 * h,
            in_per_layer=2 * h + f,
        ),
        "decoder": Linear(in_features=h, out_features=arch.vocab_size, per_layer=0),
    }


def lora_targets(arch: Architecture, targets: list[str] | None) -> tuple[frozenset[str], str]:
    """The module names ``targets`` adapts, and a sentence saying which (and why).

    Raises :class:`InvalidModel` naming each entry that matches no linear module, or
    the field when the model type has no PEFT default.
    """
    modules = linear_modules(arch)
    if targets is None:
        default = PEFT_DEFAULT_TARGETS.get(arch.model_type)
        if default is None:
            raise InvalidModel(
                [
                    (
                        PATH,
                        f"PEFT has no default target modules for model_type {arch.model_type!r}; "
                        f"name them (linear modules: {', '.join(sorted(modules))}, or all-linear)",
                    )
                ]
            )
        return frozenset(default), (
            f"LoRA targets: PEFT's default for {arch.model_type}, {', '.join(default)}"
        )
    if "all-linear" in targets:
        if len(targets) > 1:
            raise InvalidModel([(PATH, "all-linear names every linear module; give it alone")])
        chosen = frozenset(n for n, m in modules.items() if m.per_layer)
        return chosen, "LoRA targets: all-linear, every linear module but the output head"
    errors = []
    chosen_names = set()
    for i, name in enumerate(targets):
        last = name.rsplit(".", 1)[-1]
        if last not in modules:
            errors.append(
                (
                    f"{PATH}[{i}]",
                    f"{name!r} matches no linear module of {arch.model_type} "
                    f"({', '.join(sorted(modules))}, or all-linear)",
                )
            )
        chosen_names.add(last)
    if errors:
        raise InvalidModel(errors)
    return frozenset(chosen_names), f"LoRA targets: {', '.join(targets)}"


def lora_parameters(arch: Architecture, targets: frozenset[str], rank: int) -> int:
    """Adapter parameters: rank × (in + out) for each adapted linear, every layer."""
    total = 0
    for name, m in linear_modules(arch).items():
        if name in targets:
            if m.in_out_total:
                total += rank * m.in_out_total
                continue
            count = m.per_layer * arch.num_layers if m.per_layer else 1
            total += rank * (m.in_features + m.out_features) * count
    return total
