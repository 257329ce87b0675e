"""Run accuracy cases: a real CPU step per case against the estimator (runtime cpu).

    python -m bench.accuracy.run [--fast] [--only NAME] [--tag TAG]

Writes bench/results/accuracy.json and prints the table docs/accuracy.md quotes.
``--tag`` runs the cases with that tag and puts their rows into the committed
bench/results/accuracy.json (replacing rows of the same name), measured with the same
torch: a new group of cases without re-measuring the other 77 minutes of the grid.
The other rows keep their measures (the estimator does not change what a real step
allocates) and are estimated again with today's estimator.
"""

import argparse
import json
import time
from typing import Any

import msgspec
import torch

from bench.accuracy.cases import FAST, GRID, Case
from bench.accuracy.measure import Measured, measure_inference, measure_training
from bench.accuracy.stats import RESULTS, error_stats, write_run
from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.memory.estimate import estimate
from gpuplan.core.memory.schema import EstimateRequest

DTYPES = {
    "fp32": torch.float32,
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
    "amp_bf16": torch.float32,
}


# The fields of a Case that are fields of the API's workload, each with the API's name for it.
WORKLOAD_FIELDS = {
    "mode": "mode",
    "batch": "batch_size",
    "seq": "sequence_length",
    "precision": "precision",
    "optimizer": "optimizer",
    "attention": "attention",
    "checkpointing": "gradient_checkpointing",
    "accumulation": "gradient_accumulation_steps",
    "new_tokens": "max_new_tokens",
    "keep_outputs": "keep_outputs",
    "loss_chunks": "loss_chunks",
    "in_backward": "optimizer_in_backward",
}


def request_for(case: Case) -> EstimateRequest:
    """The estimate request for ``case`` (runtime cpu), checked as the API checks one."""
    workload = {api: getattr(case, name) for name, api in WORKLOAD_FIELDS.items()}
    if case.mode == "finetune_lora":
        workload["lora"] = {
            "rank": case.lora_rank,
            "target_modules": list(case.lora_targets),
            "dropout": case.lora_dropout,
        }
    if case.framework:
        fsdp1 = {
            "use_orig_params": case.use_orig_params,
            "backward_prefetch": case.backward_prefetch,
            "param_dtype": case.param_dtype or None,
            "accumulate_without_sync": case.no_sync,
        }
        if case.mode == "finetune_lora":
            fsdp1["adapters"] = case.adapters
        workload["parallelism"] = {"framework": case.framework, "data": case.data, "fsdp1": fsdp1}
    model = {"hf_config": case.config, "head": case.head or None, "num_labels": case.num_labels}
    return msgspec.convert(
        {"model": model, "workload": workload, "runtime": "cpu"}, EstimateRequest
    )


def model_for(case: Case) -> tuple[Any, Any]:
    """(a function building ``case``'s model, its transformers config)."""
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM

    config = dict(case.config)
    model_type = config.pop("model_type")
    if case.head:
        config["num_labels"] = case.num_labels
        config.setdefault("pad_token_id", 0)  # sequence classifiers pool the last non-pad token
    hf = AutoConfig.for_model(model_type, **config)
    cls: Any = AutoModelForMaskedLM if model_type in ("bert", "roberta") else AutoModelForCausalLM
    if case.head == "sequence_classification":
        cls = transformers.AutoModelForSequenceClassification
    elif case.head == "token_classification":
        cls = transformers.AutoModelForTokenClassification

    def build() -> Any:
        torch.manual_seed(0)
        model = cls.from_config(
            hf, attn_implementation=case.attention, dtype=DTYPES[case.precision]
        )
        if case.checkpointing == "full":
            model.gradient_checkpointing_enable()
        if case.mode == "finetune_lora":
            from peft import LoraConfig, get_peft_model

            lora = LoraConfig(
                r=case.lora_rank,
                target_modules=list(case.lora_targets),
                lora_dropout=case.lora_dropout,
            )
            # Adapters inside their layer's FSDP1 unit share its FlatParameter, whose
            # dtype must be uniform: they keep the base's dtype (litgpt's LoRA does).
            shared = case.framework == "fsdp1" and case.adapters == "in_layer_units"
            model = get_peft_model(model, lora, autocast_adapter_dtype=not shared)
        return model

    return build, hf


def batch_for(case: Case, hf: Any) -> dict[str, Any]:
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, hf.vocab_size, (case.batch, case.seq), generator=generator)
    if case.mode == "inference" or case.loss_chunks > 1:
        return {"input_ids": ids}  # a chunked loss is the loop's (bench/accuracy/measure.py)
    if case.head == "sequence_classification":
        return {"input_ids": ids, "labels": torch.randint(0, case.num_labels, (case.batch,))}
    if case.head == "token_classification":
        labels = torch.randint(0, case.num_labels, (case.batch, case.seq), generator=generator)
        return {"input_ids": ids, "labels": labels}
    return {"input_ids": ids, "labels": ids}


def optimizer_for(case: Case) -> Any:
    """The case's optimizer over the parameters that train."""

    def trainable(m: Any) -> list[Any]:
        return [p for p in m.parameters() if p.requires_grad]

    optimizers = {
        "adamw": lambda m: torch.optim.AdamW(trainable(m), lr=1e-4),
        "adam": lambda m: torch.optim.Adam(trainable(m), lr=1e-4),
        "sgd": lambda m: torch.optim.SGD(trainable(m), lr=1e-4),
        "sgd_momentum": lambda m: torch.optim.SGD(trainable(m), lr=1e-4, momentum=0.9),
        "adafactor": lambda m: torch.optim.Adafactor(trainable(m), lr=1e-2),
    }
    return optimizers[case.optimizer]


def run_case(case: Case) -> Measured:
    if case.framework == "fsdp1":
        from bench.accuracy.fsdp1 import measure_fsdp1

        return measure_fsdp1(case)
    build, hf = model_for(case)

    def batch() -> dict[str, Any]:
        return batch_for(case, hf)

    if case.mode == "inference":
        return measure_inference(build, batch, case.new_tokens)
    autocast = torch.bfloat16 if case.precision == "amp_bf16" else None
    return measure_training(
        build,
        batch,
        optimizer_for(case),
        accumulation=case.accumulation,
        autocast=autocast,
        keep_outputs=case.keep_outputs,
        loss_chunks=case.loss_chunks,
        in_backward=case.in_backward,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fast", action="store_true")
    parser.add_argument("--only")
    parser.add_argument("--tag")
    args = parser.parse_args()
    torch.set_num_threads(2)
    cases = FAST if args.fast else GRID
    if args.only:
        cases = [c for c in cases if args.only in c.name]
    if args.tag:
        cases = [c for c in cases if args.tag in c.tags]
    rows: list[dict[str, Any]] = []
    catalog = builtin_catalog()
    for case in cases:
        started = time.perf_counter()
        measured = run_case(case)
        seconds = time.perf_counter() - started
        result = estimate(request_for(case), catalog)
        error = (result.peak_bytes - measured.peak_bytes) / measured.peak_bytes
        rows.append(
            {
                "case": case.name,
                "measured_bytes": measured.peak_bytes,
                "estimated_bytes": result.peak_bytes,
                "error": error,
                "phase": result.peak_phase,
                "measured_phases": measured.phases,
                "parameters": measured.parameters,
                "estimated_parameters": result.parameters,
                "seconds": round(seconds, 1),
            }
        )
        print(
            f"{case.name:32s} measured {measured.peak_bytes / 2**20:9.2f} MiB  estimated {result.peak_bytes / 2**20:9.2f} MiB  error {error:+7.2%}  ({result.peak_phase}; {seconds:.0f} s)",
            flush=True,
        )
    if args.tag and not args.only and not args.fast:
        rows = _merged(rows)
    summary = error_stats([r["error"] for r in rows])
    print(json.dumps(summary))
    if not args.only:
        write_run("accuracy_fast.json" if args.fast else "accuracy.json", summary, rows)


def _merged(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The committed grid's rows with ``rows`` in place of theirs, in the grid's order;
    refused when the committed rows were measured with another torch."""
    committed = json.loads((RESULTS / "accuracy.json").read_text())
    if committed["torch"] != torch.__version__:
        raise SystemExit(f"accuracy.json was measured with torch {committed['torch']}: rerun all")
    by_name = {r["case"]: r for r in committed["rows"]} | {r["case"]: r for r in rows}
    fresh = {r["case"] for r in rows}
    catalog = builtin_catalog()
    merged = []
    for case in GRID:
        row = by_name.get(case.name)
        if row is None:
            continue
        if case.name not in fresh:
            result = estimate(request_for(case), catalog)
            measured = row["measured_bytes"]
            row = row | {
                "estimated_bytes": result.peak_bytes,
                "error": (result.peak_bytes - measured) / measured,
                "phase": result.peak_phase,
            }
        merged.append(row)
    return merged


if __name__ == "__main__":
    main()
