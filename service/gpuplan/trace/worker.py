"""The API's trace worker: one request on stdin, one answer on stdout, then exit.

The API runs each trace in a fresh subprocess of this module: the event loop stays
free, a hard time limit is a kill, and whatever a trace leaves behind (fake-mode
caches, a process group) dies with the process. Input is a ``TraceRequest``
(JSON); output is ``{"result": TraceResult}`` or ``{"error": kind, "detail": text}``
with kind ``missing`` (torch or transformers not installed), ``invalid`` (the config, or
a workload field this model cannot take: ``path`` names the field) or ``untraceable``
(the model fails under fake tensors).
"""

import os
import sys
from typing import Any

import msgspec

from gpuplan.core.trace.schema import TraceRequest

PROBE_BUDGET_ENV = "GPUPLAN_TRACE_PROBE_BUDGET_BYTES"
"""The server's ``trace_probe_budget_bytes``, handed to the worker."""


def _answer(payload: dict[str, Any]) -> None:
    sys.stdout.buffer.write(msgspec.json.encode(payload))
    sys.stdout.flush()


def answer(
    request: TraceRequest,
    probe_budget_bytes: int | None = None,
    passthrough: tuple[type[BaseException], ...] = (),
) -> dict[str, Any]:
    """Trace ``request``: ``{"result": ...}`` or ``{"error": kind, "detail": text}``
    (``"path"`` too when the error is one field's).

    Exceptions of ``passthrough`` (a job queue's time limit) are raised, not answered.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401

        from gpuplan.trace.hf import InvalidConfig, InvalidWorkload, builder
        from gpuplan.trace.probe import DEFAULT_BUDGET_BYTES
        from gpuplan.trace.run import trace
    except ImportError as exc:
        return {"error": "missing", "detail": str(exc)}
    if probe_budget_bytes is None:
        probe_budget_bytes = int(os.environ.get(PROBE_BUDGET_ENV, DEFAULT_BUDGET_BYTES))
    workload = request.workload
    try:
        build = builder(request.model.hf_config, workload)
        result = trace(
            build,
            mode="inference" if workload.mode == "inference" else "training",
            optimizer=workload.optimizer,
            steps=workload.steps,
            amp=workload.amp,
            runtime=request.runtime,
            fsdp=workload.fsdp,
            tensor_parallel=workload.tensor_parallel,
            new_tokens=workload.new_tokens,
            keep_outputs=workload.keep_outputs,
            expandable_segments=workload.expandable_segments,
            probe_budget_bytes=probe_budget_bytes,
        )
        result.notes[:0] = build.notes
    except passthrough:
        raise
    except (InvalidConfig, InvalidWorkload) as exc:
        return {"error": "invalid", "detail": str(exc)[:2000], "path": exc.path}
    except Exception as exc:  # a client's config must not crash the worker: report it
        return {"error": "untraceable", "detail": f"{type(exc).__name__}: {exc}"[:2000]}
    return {"result": msgspec.to_builtins(result)}


def main() -> int:
    request = msgspec.json.decode(sys.stdin.buffer.read(), type=TraceRequest)
    _answer(answer(request))
    return 0


if __name__ == "__main__":
    sys.exit(main())
