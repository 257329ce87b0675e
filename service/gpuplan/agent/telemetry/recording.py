"""Recorded NVML answers: capture a real GPU once, replay it in tests forever.

:class:`RecordingNvml` wraps the real ``pynvml`` module and writes down every call
the collector makes and its answer (a value or an NVML error code);
:class:`ReplayNvml` answers the same calls from such a recording. The collector
cannot tell them apart from ``pynvml``, so the tests exercise the collector's real
code path, error handling included, without a GPU.

A recording is JSON: ``{"calls": {"<function>(<args>)": answer}}``. Device handles
appear in keys by name (``gpu0``, ``gpu1/mig0``, ``gpu1/gi2``), structs as objects
of their fields, errors as ``{"$error": "NVML_ERROR_NOT_SUPPORTED"}`` and handles
as ``{"$handle": "gpu0"}``. A call absent from a recording answers
``NVML_ERROR_FUNCTION_NOT_FOUND``, as an older driver lacking the symbol would.

GPM (GPU Performance Monitoring) samples are opaque buffers whose content means
nothing outside the driver, so a recording names each one by what it sampled and
when: the n-th ``nvmlGpmSampleGet`` of ``gpu0`` fills ``gpu0/gpm<n>``, the n-th
``nvmlGpmMigSampleGet`` of GPU instance 2 of ``gpu1`` fills ``gpu1/gi2/gpm<n>``
(answer ``null``), and ``nvmlGpmMetricsGet(gpu0/gpm1, gpu0/gpm2, [2,5,10])`` answers
the metrics computed between two of them as ``[{"metricId": 2, "nvmlReturn": 0,
"value": 37.5}, ...]``. The collector fills ``c_nvmlGpmMetricsGet_t`` through the
proxy, which hands it a :class:`GpmRequest` of the same fields (a ctypes struct holds
no named sample); ``nvmlGpmSampleFree`` is passed on and not recorded. A replay that
runs past the samples a recording holds for a source starts over at its first
(``gpu0/gpm1`` after the last), so a recording that also answers the pair from the
last sample back to the first replays GPM for as long as the agent runs.

Capture with ``python -m gpuplan.agent.telemetry.record > node.json`` on a GPU node.
"""

import ctypes
import json
import re
import sys
from collections.abc import Callable, Mapping
from functools import partial
from types import SimpleNamespace
from typing import Any

# Functions that return a handle, and how the returned handle is named.
_HANDLE_FUNCTIONS: dict[str, Callable[[list[str]], str]] = {
    "nvmlDeviceGetHandleByIndex": lambda a: f"gpu{a[0]}",
    "nvmlDeviceGetMigDeviceHandleByIndex": lambda a: f"{a[0]}/mig{a[1]}",
    "nvmlDeviceGetGpuInstanceById": lambda a: f"{a[0]}/gi{a[1]}",
    "nvmlDeviceGetDeviceHandleFromMigDeviceHandle": lambda a: a[0].split("/")[0],
    "nvmlGpmSampleAlloc": lambda a: "gpm",  # named when a sample get fills it
}
# GPM calls that fill a sample (the last argument) of the device (and GPU instance).
_SAMPLE_GETS = ("nvmlGpmSampleGet", "nvmlGpmMigSampleGet")
_SAMPLE_KEY = re.compile(r"^nvmlGpm(?:Mig)?SampleGet\(.*, (\S+)/gpm(\d+)\)$")


class Handle:
    """A named stand-in for an NVML handle (wrapping the real one when recording)."""

    def __init__(self, name: str, real: Any = None) -> None:
        self.name = name
        self.real = real

    def __repr__(self) -> str:
        return f"Handle({self.name})"


def _arg_text(arg: Any) -> str:
    if isinstance(arg, Handle):
        return arg.name
    if isinstance(arg, list | tuple):
        return json.dumps(list(arg), separators=(",", ":"))
    return json.dumps(arg) if isinstance(arg, str) else str(arg)


def call_key(function: str, args: tuple[Any, ...]) -> str:
    return f"{function}({', '.join(_arg_text(a) for a in args)})"


def to_json(value: Any) -> Any:  # noqa: PLR0911 - one return per kind of answer
    """A pynvml answer (ctypes struct, array, bytes, list) as plain JSON data."""
    if isinstance(value, ctypes.Structure | ctypes.Union):
        out: dict[str, Any] = {}
        for field in value._fields_:
            name, kind = field[0], field[1]
            if issubclass(kind, ctypes._Pointer) or kind is ctypes.c_void_p:
                continue  # addresses mean nothing in another process
            out[name] = to_json(getattr(value, name))
        return out
    if isinstance(value, SimpleNamespace):  # an answer replayed from a recording
        return {k: to_json(v) for k, v in vars(value).items()}
    if isinstance(value, ctypes.Array):
        return [to_json(v) for v in value]
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    if isinstance(value, ctypes._SimpleCData):
        return value.value
    return value


class GpmMetric:
    """One entry of :class:`GpmRequest`, the fields of ``c_nvmlGpmMetric_t`` that matter."""

    def __init__(self) -> None:
        self.metricId = 0
        self.nvmlReturn = 0
        self.value = 0.0


class GpmRequest:
    """``c_nvmlGpmMetricsGet_t`` as a proxy hands it to the collector: the same fields,
    but samples are named :class:`Handle` objects that a ctypes struct cannot hold."""

    def __init__(self, size: int) -> None:
        self.version = 0
        self.numMetrics = 0
        self.sample1: Any = None
        self.sample2: Any = None
        self.metrics = [GpmMetric() for _ in range(size)]

    def metric_ids(self) -> list[int]:
        return [int(m.metricId) for m in self.metrics[: self.numMetrics]]


def _to_object(value: Any) -> Any:
    if isinstance(value, dict):
        return SimpleNamespace(**{k: _to_object(v) for k, v in value.items()})
    if isinstance(value, list):
        return [_to_object(v) for v in value]
    return value


class _NvmlProxy:
    """``pynvml`` as the collector sees it, each ``nvml*`` function routed through
    :meth:`_call`; constants, error classes and the rest pass through untouched."""

    def __init__(self, pynvml: Any) -> None:
        self._pynvml = pynvml
        self._sample_gets: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._pynvml, name)
        if not name.startswith("nvml") or not callable(target):
            return target
        return partial(self._call, name, target)

    def c_nvmlGpmMetricsGet_t(self) -> GpmRequest:
        return GpmRequest(int(self._pynvml.NVML_GPM_METRIC_MAX))

    def _name_sample(self, name: str, args: tuple[Any, ...]) -> None:
        """Name the sample a GPM sample get fills: ``<device>[/gi<id>]/gpm<n>``."""
        source = _arg_text(args[0])
        if name == "nvmlGpmMigSampleGet":
            source += f"/gi{_arg_text(args[1])}"
        count = self._sample_gets[source] = self._sample_gets.get(source, 0) + 1
        sample = args[-1]
        if isinstance(sample, Handle):
            sample.name = f"{source}/gpm{self._sample_number(source, count)}"

    def _sample_number(self, source: str, count: int) -> int:
        """The name's number of the ``count``-th sample of ``source``."""
        return count

    def _call(self, name: str, target: Callable[..., Any], *args: Any) -> Any:
        raise NotImplementedError


class ReplayNvml(_NvmlProxy):
    """Answers NVML calls from a recording; constants and errors come from ``pynvml``."""

    def __init__(self, recording: Mapping[str, Any], pynvml: Any) -> None:
        super().__init__(pynvml)
        self._calls: Mapping[str, Any] = recording["calls"]
        self.missed: list[str] = []
        """Calls the recording did not hold, for tests to inspect."""
        self._recorded_samples: dict[str, int] = {}
        for key in self._calls:
            match = _SAMPLE_KEY.match(key)
            if match:
                source, number = match.group(1), int(match.group(2))
                self._recorded_samples[source] = max(number, self._recorded_samples.get(source, 0))

    def _sample_number(self, source: str, count: int) -> int:
        """Past the last recorded sample of ``source``, start over at its first."""
        recorded = self._recorded_samples.get(source)
        return count if not recorded else (count - 1) % recorded + 1

    def _call(self, name: str, target: Callable[..., Any], *args: Any) -> Any:
        if name == "nvmlGpmSampleFree":
            return None
        if name in _SAMPLE_GETS:
            self._name_sample(name, args)
        request = args[0] if name == "nvmlGpmMetricsGet" else None
        if isinstance(request, GpmRequest):
            args = (request.sample1, request.sample2, request.metric_ids())
        key = call_key(name, args)
        if key not in self._calls:
            self.missed.append(key)
            raise self._pynvml.NVMLError(self._pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        value = self._calls[key]
        if isinstance(value, dict) and "$error" in value:
            raise self._pynvml.NVMLError(getattr(self._pynvml, value["$error"]))
        if isinstance(value, dict) and "$handle" in value:
            return Handle(value["$handle"])
        if isinstance(request, GpmRequest):
            for slot, answer in zip(request.metrics, value, strict=False):
                slot.nvmlReturn, slot.value = answer["nvmlReturn"], answer["value"]
            return request
        return _to_object(value)


def _error_name(err: Exception) -> str:
    """``NVML_ERROR_NOT_SUPPORTED`` for an error of code 3, looked up in pynvml itself."""
    module = sys.modules.get(type(err).__module__)
    code = getattr(err, "value", None)
    for name, value in vars(module).items() if module is not None else ():
        if name.startswith("NVML_ERROR_") and value == code:
            return name
    return "NVML_ERROR_UNKNOWN"


class RecordingNvml(_NvmlProxy):
    """Passes calls to ``pynvml`` and records each answer under its call key."""

    def __init__(self, pynvml: Any) -> None:
        super().__init__(pynvml)
        self.calls: dict[str, Any] = {}

    def _call(self, name: str, target: Callable[..., Any], *args: Any) -> Any:
        if name == "nvmlGpmSampleFree":
            return target(*[a.real if isinstance(a, Handle) else a for a in args])
        if name in _SAMPLE_GETS:
            self._name_sample(name, args)
        if name == "nvmlGpmMetricsGet" and isinstance(args[0], GpmRequest):
            return self._metrics_get(target, args[0])
        key = call_key(name, args)
        real_args = [a.real if isinstance(a, Handle) else a for a in args]
        try:
            result = target(*real_args)
        except self._pynvml.NVMLError as err:
            self.calls[key] = {"$error": _error_name(err)}
            raise
        if name in _SAMPLE_GETS:
            self.calls[key] = None  # the sample itself is the driver's opaque state
            return result
        if name in _HANDLE_FUNCTIONS:
            handle = Handle(_HANDLE_FUNCTIONS[name]([_arg_text(a) for a in args]), result)
            self.calls[key] = {"$handle": handle.name}
            return handle
        self.calls[key] = to_json(result)
        return result

    def _metrics_get(self, target: Callable[..., Any], request: GpmRequest) -> GpmRequest:
        """Pass the collector's request on as the wrapped module's own struct (a ctypes
        ``c_nvmlGpmMetricsGet_t`` over the driver), and record what it answered."""
        ids = request.metric_ids()
        key = call_key("nvmlGpmMetricsGet", (request.sample1, request.sample2, ids))
        inner = self._pynvml.c_nvmlGpmMetricsGet_t()
        inner.version, inner.numMetrics = request.version, request.numMetrics
        inner.sample1, inner.sample2 = request.sample1.real, request.sample2.real
        for slot, metric_id in enumerate(ids):
            inner.metrics[slot].metricId = metric_id
        try:
            target(inner)
        except self._pynvml.NVMLError as err:
            self.calls[key] = {"$error": _error_name(err)}
            raise
        answers = []
        for slot, metric_id in enumerate(ids):
            got = inner.metrics[slot]
            request.metrics[slot].nvmlReturn, request.metrics[slot].value = (
                int(got.nvmlReturn),
                float(got.value),
            )
            answers.append(
                {"metricId": metric_id, "nvmlReturn": int(got.nvmlReturn), "value": got.value}
            )
        self.calls[key] = answers
        return request

    def recording(self, comment: str) -> dict[str, Any]:
        return {"_comment": comment, "calls": dict(sorted(self.calls.items()))}
