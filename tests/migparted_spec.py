"""What nvidia-mig-parted accepts as a config file, re-implemented in Python for the tests.

The rules are those of NVIDIA/mig-parted at bd7160f (Aug 2026), read from its Go source and
written again here (no code copied):

- ``api/spec/v1/spec.go``: ``Spec.UnmarshalJSON`` and ``MigConfigSpec.UnmarshalJSON``, the
  fields each level accepts, the ones it requires and the messages it returns;
- ``pkg/types/mig_config.go``: ``MigConfig.AssertValidFormat`` (counts per profile);
- vendored ``github.com/NVIDIA/go-nvlib/pkg/nvlib/device/mig_profile.go``: the profile
  grammar of ``parseMigProfile`` (``[<c>c.]<g>g.<gb>gb`` then ``+attr[,attr]`` or
  ``-attr[,attr]``), and ``getMigMemorySizeGB``, the rule that names a profile;
- ``pkg/types/device.go``: ``NewDeviceIDFromString`` and ``DeviceID.Matches`` (device filters);
- ``api/spec/v1/helpers.go`` and ``cmd/nvidia-mig-parted/assert/assert.go``: how a named config
  is selected and which entries apply to which GPU of a node.

mig-parted reads YAML with ``sigs.k8s.io/yaml``: go-yaml v2 (YAML 1.1) into generic values,
non-string keys turned into strings, then ``encoding/json`` into the Go types. ``load_yaml``
does the same with PyYAML's YAML 1.1 loader plus go-yaml's extra booleans (``y``/``n``);
a JSON ``null`` then behaves as Go's decoder treats it (no effect on a string, bool or int,
nil for a map or slice). Map order is random in Go, so where a file has several faults
mig-parted may report another one first; here the first in file order is reported.

``strict=True`` adds checks mig-parted does not make but a generated file should pass: no
duplicate key (go-yaml keeps the last one silently) and device filters that parse (mig-parted
ignores a filter it cannot parse, which then matches no GPU).
"""

import math
import re
from dataclasses import dataclass, field
from typing import Any, TypeVar

import yaml

VERSION = "v1"
_INT64 = (-(2**63), 2**63 - 1)
# encoding/json renders a float64 below 1e21 without an exponent; an integral one then
# decodes into a Go int.
_FLOAT_AS_INT = 1e21
_T = TypeVar("_T")


class SpecError(ValueError):
    """mig-parted would refuse the file; the message is the one mig-parted returns."""


# -- YAML, as sigs.k8s.io/yaml reads it -----------------------------------------------------------


class _Loader(yaml.SafeLoader):
    """YAML 1.1 with go-yaml v2's booleans (``y``, ``n`` and the cases it accepts)."""

    strict = False


_BOOLS = {
    **dict.fromkeys(
        ["y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"], True
    ),
    **dict.fromkeys(
        ["n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"], False
    ),
}


def _bool(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> bool:
    return _BOOLS[loader.construct_scalar(node)]


def _mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    out: dict[Any, Any] = {}
    loader.flatten_mapping(node)
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if getattr(loader, "strict", False) and key in seen:
            raise SpecError(f"duplicate key {key!r} (line {key_node.start_mark.line + 1})")
        seen.add(key)
        out[key] = loader.construct_object(value_node, deep=True)
    return out


_Loader.add_constructor("tag:yaml.org,2002:bool", _bool)
_Loader.add_constructor("tag:yaml.org,2002:map", _mapping)
_Loader.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:y|Y|n|N)$"), list("yYnN"))


class _StrictLoader(_Loader):
    strict = True


def load_yaml(text: str, *, strict: bool = False) -> Any:
    """The JSON value sigs.k8s.io/yaml hands to encoding/json for ``text``."""
    try:
        document = yaml.load(text, Loader=_StrictLoader if strict else _Loader)
    except yaml.YAMLError as exc:
        raise SpecError(f"error converting YAML to JSON: {exc}") from None
    return _jsonable(document)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {_key(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


def _key(key: Any) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, int):
        return str(key)
    if isinstance(key, float):
        return "NaN" if math.isnan(key) else repr(key)  # close to Go's FormatFloat('g')
    raise SpecError(f"unsupported map key of type: {type(key).__name__}, key: {key!r}")


# -- encoding/json's rules for the Go types involved ----------------------------------------------


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _cannot(value: Any, go_type: str, what: str) -> SpecError:
    return SpecError(
        f"json: cannot unmarshal {_json_type(value)} into Go value of type {go_type} ({what})"
    )


def _typed(value: Any, what: str, kind: type[_T], go_type: str) -> _T | None:
    """json.Unmarshal of one value into a Go ``go_type``: null is returned as None (the
    caller gives Go's zero value or nil), a value of another JSON type is refused."""
    if value is None or isinstance(value, kind):
        return value
    raise _cannot(value, go_type, what)


def _neither_string_nor(value: Any, list_type: str) -> SpecError:
    """A field mig-parted decodes as a Go string, else as ``list_type``: both errors, joined."""
    return SpecError(
        f"(json: cannot unmarshal {_json_type(value)} into Go value of type string, "
        f"json: cannot unmarshal {_json_type(value)} into Go value of type {list_type})"
    )


def _as_string(value: Any, what: str) -> str:
    """json.Unmarshal into a Go string: null leaves it empty."""
    return _typed(value, what, str, "string") or ""


def _as_bool(value: Any, what: str) -> bool:
    return _typed(value, what, bool, "bool") or False


def _as_int(value: object, what: str) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _cannot(value, "int", what)
    if isinstance(value, float):
        if not (value.is_integer() and abs(value) < _FLOAT_AS_INT):
            raise SpecError(
                f"json: cannot unmarshal number {value} into Go value of type int ({what})"
            )
        value = int(value)
    if not _INT64[0] <= value <= _INT64[1]:
        raise SpecError(f"json: cannot unmarshal number {value} into Go value of type int ({what})")
    return value


def _as_object(value: Any, what: str) -> dict[str, Any] | None:
    """json.Unmarshal into a Go map: null gives a nil map."""
    return _typed(value, what, dict, "map")


def _as_array(value: Any, what: str) -> list[Any] | None:
    return _typed(value, what, list, "slice")


# -- profiles (go-nvlib) --------------------------------------------------------------------------


@dataclass(frozen=True)
class MigProfileInfo:
    c: int
    g: int
    gb: int
    attributes: tuple[str, ...] = ()
    neg_attributes: tuple[str, ...] = ()


def _atoi(text: str) -> int:
    """strconv.Atoi: an optional sign and ASCII digits, within int64."""
    if not re.fullmatch(r"[+-]?[0-9]+", text):
        raise ValueError(text)
    number = int(text)
    if not _INT64[0] <= number <= _INT64[1]:
        raise ValueError(text)
    return number


def _is_go_space(ch: str) -> bool:
    """unicode.IsSpace as Go defines it (Python's isspace also counts \\x1c-\\x1f)."""
    return ch in "\t\n\v\f\r \x85\xa0" or (ord(ch) > 0xFF and ch.isspace())


def _go_trim(text: str) -> str:
    start, end = 0, len(text)
    while start < end and _is_go_space(text[start]):
        start += 1
    while end > start and _is_go_space(text[end - 1]):
        end -= 1
    return text[start:end]


def _field(text: str, suffix: str) -> int:
    if _go_trim(text) != text:
        raise SpecError(f"leading or trailing spaces on '%d{suffix}'")
    if not text.endswith(suffix):
        raise SpecError(f"missing '{suffix}' from '%d{suffix}'")
    try:
        return _atoi(text[: -len(suffix)])
    except ValueError:
        raise SpecError(f"malformed number in '%d{suffix}'") from None


def _fields(text: str) -> tuple[int, int, int]:
    parts = text.split(".", 2)
    if len(parts) == 3:
        return _field(parts[0], "c"), _field(parts[1], "g"), _field(parts[2], "gb")
    if len(parts) == 2:
        g = _field(parts[0], "g")
        return g, g, _field(parts[1], "gb")
    raise SpecError("parsed wrong number of fields, expected 2 or 3")


def _attributes(text: str) -> tuple[str, ...]:
    attrs = text.split(",")
    seen: set[str] = set()
    for a in attrs:
        if a in seen:
            raise SpecError("non unique attribute in list")
        if a == "":
            raise SpecError("empty attribute in list")
        if _go_trim(a) != a:
            raise SpecError("leading or trailing spaces in attribute")
        if a[0].isascii() and a[0].isdigit():
            raise SpecError("attribute begins with a number")
        if a[0] == "." or a[-1] == ".":
            raise SpecError("attribute begins/ends with a dot")
        if any(not (ch.isascii() and (ch.isalnum() or ch == ".")) for ch in a):
            raise SpecError("non alpha-numeric character or digit in attribute")
        seen.add(a)
    return tuple(attrs)


def parse_mig_profile(profile: str) -> MigProfileInfo:
    """go-nvlib's ``parseMigProfile``: the format check mig-parted applies to every key."""
    if profile == "":
        raise SpecError("profile is the empty string")
    plus = profile.split("+", 1)
    minus = profile.split("-", 1)
    if len(plus) == 2 and len(minus) == 2:
        raise SpecError(f"profile '{profile}' contains both '+/-' attributes")
    parts = plus if len(plus) == 2 else minus
    try:
        c, g, gb = _fields(parts[0])
    except SpecError as exc:
        raise SpecError(f"cannot parse fields of '{profile}': {exc}") from None
    if len(parts) == 1:
        return MigProfileInfo(c, g, gb)
    try:
        attrs = _attributes(parts[1])
    except SpecError as exc:
        raise SpecError(f"cannot parse attributes of '{profile}': {exc}") from None
    if len(minus) == 2:
        return MigProfileInfo(c, g, gb, neg_attributes=attrs)
    return MigProfileInfo(c, g, gb, attributes=attrs)


def mig_memory_size_gb(total_device_memory_bytes: int, mig_memory_mib: int) -> int:
    """go-nvlib ``getMigMemorySizeGB``: the ``gb`` a GI of this size gets in its name."""
    fraction = mig_memory_mib * 2**20 / total_device_memory_bytes
    fraction = math.ceil(fraction * 8) / 8
    total_gb = (total_device_memory_bytes + 2**30 - 1) // 2**30
    value = fraction * total_gb
    return math.floor(value + 0.5)  # Go's math.Round: half away from zero (value >= 0)


def _assert_valid_counts(devices: dict[str, int]) -> None:
    """``MigConfig.AssertValidFormat``."""
    if not devices:
        return
    for name, count in devices.items():
        try:
            parse_mig_profile(name)
        except SpecError as exc:
            raise SpecError(f"invalid format for '{name}': {exc}") from None
        if count < 0:
            raise SpecError(f"invalid count for '{count}': <nil>")
    if all(count == 0 for count in devices.values()):
        raise SpecError("all counts for all MigProfiles are 0")


# -- device ids (pkg/types/device.go) -------------------------------------------------------------


@dataclass(frozen=True)
class DeviceID:
    device: int
    vendor: int
    subsystem_device: int = 0
    subsystem_vendor: int = 0
    has_subsystem: bool = False

    def matches(self, hardware: "DeviceID") -> bool:
        if (self.device, self.vendor) != (hardware.device, hardware.vendor):
            return False
        if self.has_subsystem:
            return (self.subsystem_device, self.subsystem_vendor) == (
                hardware.subsystem_device,
                hardware.subsystem_vendor,
            )
        return True


def _parse_uint32(text: str) -> int:
    """strconv.ParseUint(text, 0, 32): prefixes 0x/0o/0b, a leading 0 for octal, ``_`` digits."""
    body = text
    if re.fullmatch(r"0[0-7_]+", body) and not body.startswith("0_"):
        body = "0o" + body[1:]
    try:
        value = int(body, 0)
    except ValueError:
        raise SpecError(f"unable to create DeviceID from string '{text}': invalid syntax") from None
    if not 0 <= value < 2**32 or text.startswith(("+", "-")):
        raise SpecError(f"unable to create DeviceID from string '{text}': value out of range")
    return value


def parse_device_id(text: str) -> DeviceID:
    """``NewDeviceIDFromString``: ``0x<device><vendor>`` (one packed 32-bit number)."""
    parts = text.split(":")
    if len(parts) > 2:
        raise SpecError(f"invalid DeviceID format '{text}'")
    raw = _parse_uint32(parts[0])
    if len(parts) == 1:
        return DeviceID(raw >> 16, raw & 0xFFFF)
    sub = _parse_uint32(parts[1])
    return DeviceID(raw >> 16, raw & 0xFFFF, sub >> 16, sub & 0xFFFF, True)


# -- the spec -------------------------------------------------------------------------------------


@dataclass
class MigConfigSpec:
    devices: str | list[int]
    mig_enabled: bool
    mig_devices: dict[str, int] | None
    device_filter: str | list[str] | None = None

    def filters(self) -> list[str]:
        if isinstance(self.device_filter, str):
            return [self.device_filter] if self.device_filter else []
        return list(self.device_filter or [])

    def matches_device_filter(self, device: DeviceID) -> bool:
        """``MatchesDeviceFilter``: no filter matches every GPU; a filter that does not
        parse becomes the zero DeviceID and matches none."""
        filters = self.filters()
        if not filters:
            return True
        for text in filters:
            try:
                wanted = parse_device_id(text)
            except SpecError:
                wanted = DeviceID(0, 0)
            if wanted.matches(device):
                return True
        return False

    def matches_devices(self, index: int) -> bool:
        if isinstance(self.devices, list):
            return index in self.devices
        return self.devices == "all"


@dataclass
class Spec:
    version: str
    mig_configs: dict[str, list[MigConfigSpec]] = field(default_factory=dict)


def parse_config_spec(value: Any, where: str = "entry") -> MigConfigSpec:
    """``MigConfigSpec.UnmarshalJSON``."""
    if not isinstance(value, dict):
        if value is None:
            value = {}
        else:
            raise _cannot(value, "map", where)
    for required in ("devices", "mig-enabled"):
        if required not in value:
            raise SpecError(f"missing required field: {required}")
    devices: str | list[int] = "all"
    enabled = False
    mig_devices: dict[str, int] | None = None
    device_filter: str | list[str] | None = None
    for key, raw in value.items():
        if key == "device-filter":
            if raw is None or isinstance(raw, str):
                device_filter = _as_string(raw, "device-filter")
            elif isinstance(raw, list):
                device_filter = [_as_string(v, "device-filter") for v in raw]
            else:
                raise _neither_string_nor(raw, "[]string")
        elif key == "devices":
            if raw is None or isinstance(raw, str):
                text = _as_string(raw, "devices")
                if text != "all":
                    raise SpecError(f"invalid string input for '{key}': {text}")
                devices = text
            elif isinstance(raw, list):
                devices = [_as_int(v, "devices") for v in raw]
            else:
                raise _neither_string_nor(raw, "[]int")
        elif key == "mig-enabled":
            enabled = _as_bool(raw, "mig-enabled")
        elif key == "mig-devices":
            obj = _as_object(raw, "mig-devices")
            counts = None if obj is None else {k: _as_int(v, k) for k, v in obj.items()}
            try:
                _assert_valid_counts(counts or {})
            except SpecError as exc:
                raise SpecError(f"error validating values in '{key}' field: {exc}") from None
            mig_devices = counts
        else:
            raise SpecError(f"unexpected field: {key}")
    if enabled and mig_devices is None:
        raise SpecError("missing required field 'mig-devices' when 'mig-enabled' is true")
    if not enabled and mig_devices:
        raise SpecError("MIG devices included when 'mig-enabled' is false")
    return MigConfigSpec(devices, enabled, mig_devices, device_filter)


def parse_spec(document: Any) -> Spec:
    """``Spec.UnmarshalJSON`` on the JSON value of a file (``None`` for an empty file)."""
    if document is None:
        # An empty document decodes to JSON null, which leaves the Spec untouched.
        return Spec(version="")
    if not isinstance(document, dict):
        raise SpecError(f"json: cannot unmarshal {_json_type(document)} into Go value of type map")
    if "version" not in document and document:
        raise SpecError("unable to parse with missing 'version' field")
    version = _as_string(document.get("version"), "version")
    if version != VERSION:
        raise SpecError(f"unknown version: {version}")
    spec = Spec(version=version)
    for key, value in document.items():
        if key == "version":
            continue
        if key != "mig-configs":
            raise SpecError(f"unexpected field: {key}")
        configs = _as_object(value, "mig-configs")
        if not configs:
            raise SpecError(f"at least one entry in '{key}' is required")
        for name, entries in configs.items():
            items = _as_array(entries, name)
            if not items:
                raise SpecError(f"at least one entry in '{name}' is required")
            spec.mig_configs[name] = [
                parse_config_spec(e, f"{name}[{i}]") for i, e in enumerate(items)
            ]
    return spec


def validate(text: str, *, strict: bool = False) -> Spec:
    """The Spec mig-parted reads from ``text``; :class:`SpecError` where it refuses it.

    With ``strict`` also refuse duplicate keys and device filters that do not parse.
    """
    spec = parse_spec(load_yaml(text, strict=strict))
    if strict:
        for name, entries in spec.mig_configs.items():
            for entry in entries:
                for text_id in entry.filters():
                    try:
                        parse_device_id(text_id)
                    except SpecError as exc:
                        raise SpecError(f"config `{name}`: device-filter: {exc}") from None
    return spec


def select_config(spec: Spec, name: str = "") -> list[MigConfigSpec]:
    """``GetSelectedMigConfig``: the entries ``nvidia-mig-parted apply -c <name>`` uses."""
    if len(spec.mig_configs) > 1 and not name:
        raise SpecError(
            "missing required flag 'selected-config' when more than one config available"
        )
    if len(spec.mig_configs) == 1 and not name:
        name = next(iter(spec.mig_configs))
    if name not in spec.mig_configs:
        raise SpecError(f"selected mig-config not present: {name}")
    return spec.mig_configs[name]


def walk(entries: list[MigConfigSpec], node: list[DeviceID]) -> dict[int, list[MigConfigSpec]]:
    """``WalkSelectedMigConfigForEachGPU``: for each GPU index of ``node``, the entries that
    apply to it, in the order mig-parted applies them."""
    applied: dict[int, list[MigConfigSpec]] = {}
    for entry in entries:
        for index, device in enumerate(node):
            if entry.matches_device_filter(device) and entry.matches_devices(index):
                applied.setdefault(index, []).append(entry)
    return applied
