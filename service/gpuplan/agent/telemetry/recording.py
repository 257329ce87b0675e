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

Capture with ``python -m gpuplan.agent.telemetry.record > node.json`` on a GPU node.
"""

import ctypes
import json
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
}


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

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._pynvml, name)
        if not name.startswith("nvml") or not callable(target):
            return target
        return partial(self._call, name, target)

    def _call(self, name: str, target: Callable[..., Any], *args: Any) -> Any:
        raise NotImplementedError


class ReplayNvml(_NvmlProxy):
    """Answers NVML calls from a recording; constants and errors come from ``pynvml``."""

    def __init__(self, recording: Mapping[str, Any], pynvml: Any) -> None:
        super().__init__(pynvml)
        self._calls: Mapping[str, Any] = recording["calls"]
        self.missed: list[str] = []
        """Calls the recording did not hold, for tests to inspect."""

    def _call(self, name: str, target: Callable[..., Any], *args: Any) -> Any:
        key = call_key(name, args)
        if key not in self._calls:
            self.missed.append(key)
            raise self._pynvml.NVMLError(self._pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        value = self._calls[key]
        if isinstance(value, dict) and "$error" in value:
            raise self._pynvml.NVMLError(getattr(self._pynvml, value["$error"]))
        if isinstance(value, dict) and "$handle" in value:
            return Handle(value["$handle"])
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
        key = call_key(name, args)
        real_args = [a.real if isinstance(a, Handle) else a for a in args]
        try:
            result = target(*real_args)
        except self._pynvml.NVMLError as err:
            self.calls[key] = {"$error": _error_name(err)}
            raise
        if name in _HANDLE_FUNCTIONS:
            handle = Handle(_HANDLE_FUNCTIONS[name]([_arg_text(a) for a in args]), result)
            self.calls[key] = {"$handle": handle.name}
            return handle
        self.calls[key] = to_json(result)
        return result

    def recording(self, comment: str) -> dict[str, Any]:
        return {"_comment": comment, "calls": dict(sorted(self.calls.items()))}
