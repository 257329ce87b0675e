"""Adafactor's state against ``torch.optim.Adafactor`` itself: for every supported
``model_type`` the factored row and column variances (and the whole variances of its
vectors) that a real step creates hold the elements the estimator counts, and the
grid's Adafactor step (bench/results/accuracy.json) is estimated within 2%."""

import json
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.torch

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from bench.accuracy import cases  # noqa: E402

from gpuplan.core.memory import adafactor  # noqa: E402
from gpuplan.core.memory.hf_config import from_hf_config  # noqa: E402
from gpuplan.core.memory.modules import lora_targets  # noqa: E402
from gpuplan.core.memory.parameters import count_parameters  # noqa: E402
from tests.helpers import seeded_model  # noqa: E402

CONFIGS = {
    "llama": cases.LLAMA_STATES, "qwen2": cases.QWEN2, "gpt2": cases.GPT2, "gpt_neox": cases.NEOX,
    "opt": cases.OPT, "bert": cases.BERT, "mixtral": cases.MIXTRAL, "gemma": cases.GEMMA,
    "qwen3": cases.QWEN3, "phi3": cases.PHI3, "qwen2_moe": cases.QWEN2_MOE,
    "falcon": cases.FALCON, "roberta": cases.ROBERTA, "gpt_bigcode": cases.GPT_BIGCODE,
    "starcoder2": cases.STARCODER2, "gemma3_text": cases.GEMMA3, "olmo2": cases.OLMO2,
    "qwen3_moe": cases.QWEN3_MOE, "deepseek_v3": cases.DEEPSEEK_V3,
}  # fmt: skip


def _stepped_state(model: Any) -> int:
    """Elements of the state one real ``Adafactor.step()`` creates (the step counters
    aside), over the parameters that train."""
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.grad = torch.ones_like(p)
    optimizer = torch.optim.Adafactor(params, lr=1e-2)
    optimizer.step()
    return sum(
        t.numel()
        for state in optimizer.state.values()
        for name, t in state.items()
        if name != "step"
    )


@pytest.mark.slow
@pytest.mark.parametrize("model_type", sorted(CONFIGS))
def test_the_factored_state_is_torch_s(model_type: str) -> None:
    arch, _ = from_hf_config(CONFIGS[model_type])
    counted = adafactor.state_elements(arch, count_parameters(arch))
    assert counted == _stepped_state(seeded_model(CONFIGS[model_type]))


def test_llama_state_is_rows_plus_columns() -> None:
    """The grid's Llama: a few per mille of its parameters, not a fixed fraction."""
    arch, _ = from_hf_config(cases.LLAMA_STATES)
    counts = count_parameters(arch)
    real = _stepped_state(seeded_model(cases.LLAMA_STATES))
    assert adafactor.state_elements(arch, counts) == real
    assert real < 0.005 * counts.total


def test_lora_adapters_state_is_torch_s() -> None:
    from peft import LoraConfig, get_peft_model

    arch, _ = from_hf_config(cases.LLAMA)
    names, _ = lora_targets(arch, ["q_proj", "v_proj", "down_proj"])
    lora = LoraConfig(r=8, target_modules=["q_proj", "v_proj", "down_proj"])
    model = get_peft_model(seeded_model(cases.LLAMA), lora)
    counted = adafactor.state_elements(arch, count_parameters(arch), lora_rank=8, adapted=names)
    assert counted == _stepped_state(model)


def test_the_grid_step_is_within_two_percent() -> None:
    from bench.accuracy.cases import GRID
    from bench.accuracy.run import request_for

    from gpuplan.core.catalog import builtin_catalog
    from gpuplan.core.memory.estimate import estimate

    results = Path(__file__).resolve().parent.parent / "bench" / "results" / "accuracy.json"
    rows = {r["case"]: r for r in json.loads(results.read_text())["rows"]}
    name = "llama states fp32 adafactor"
    case = next(c for c in GRID if c.name == name)
    result = estimate(request_for(case), builtin_catalog())
    measured = rows[name]["measured_bytes"]
    assert result.peak_phase == "optimizer step"
    assert abs(result.peak_bytes - measured) / measured <= 0.02
