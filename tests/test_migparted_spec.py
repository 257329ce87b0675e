"""The Python port of mig-parted's config rules (tests/migparted_spec.py) against mig-parted's
own examples and the cases its Go tests refuse.

The YAML snippets below are short excerpts of NVIDIA/mig-parted at bd7160f (Apache-2.0):
``examples/config.yaml`` and ``deployments/systemd/config-default.yaml``. The refused cases
restate the ones in ``api/spec/v1/spec_test.go`` (written anew, as YAML).
"""

from typing import Any

import pytest

from tests.migparted_spec import (
    DeviceID,
    MigProfileInfo,
    SpecError,
    load_yaml,
    mig_memory_size_gb,
    parse_config_spec,
    parse_device_id,
    parse_mig_profile,
    parse_spec,
    select_config,
    validate,
    walk,
)

# examples/config.yaml (excerpt)
EXAMPLE = """\
version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false

  all-enabled:
    - devices: all
      mig-enabled: true
      mig-devices: {}

  all-1g.5gb.me:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.5gb+me": 1

  all-balanced:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.5gb": 2
        "2g.10gb": 1
        "3g.20gb": 1

  custom-config:
    - devices: [0,1,2,3]
      mig-enabled: false
    - devices: [4]
      mig-enabled: true
      mig-devices:
        "1g.5gb": 7
    - devices: [5]
      mig-enabled: true
      mig-devices:
        "2g.10gb": 3
"""

# deployments/systemd/config-default.yaml (excerpts: device filters as a list and as a
# string, and the RTX PRO 6000 suffixes)
DEFAULT = """\
version: v1
mig-configs:
  all-1g.10gb:
    # H100-80GB, H800-80GB, A100-80GB, A800-80GB
    - device-filter: ["0x233010DE", "0x233110DE", "0x232210DE", "0x20B210DE", "0x20B510DE", "0x20F310DE", "0x20F510DE", "0x232410DE"]
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": 7

    # A100-40GB, A800-40GB
    - device-filter: ["0x20B010DE", "0x20B110DE", "0x20F110DE", "0x20F610DE"]
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": 4

  all-1g.24gb.gfx:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.24gb+gfx": 4

  all-1g.24gb.me.all:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.24gb+me.all": 1

  all-1g.24gb-me:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.24gb-me": 4

  all-balanced:
    # A30-24GB
    - device-filter: "0x20B710DE"
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.6gb": 2
        "2g.12gb": 1
    # GB200 HGX
    - device-filter: ["0x294110DE"]
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.23gb": 2
        "2g.47gb": 1
        "3g.93gb": 1
"""

A100_80 = parse_device_id("0x20B210DE")
A100_40 = parse_device_id("0x20B010DE")
A30 = parse_device_id("0x20B710DE")


def test_accepts_the_example_config() -> None:
    spec = validate(EXAMPLE, strict=True)
    assert set(spec.mig_configs) == {
        "all-disabled", "all-enabled", "all-1g.5gb.me", "all-balanced", "custom-config"}  # fmt: skip
    enabled = spec.mig_configs["all-enabled"][0]
    assert (enabled.devices, enabled.mig_enabled, enabled.mig_devices) == ("all", True, {})
    custom = spec.mig_configs["custom-config"]
    assert [e.devices for e in custom] == [[0, 1, 2, 3], [4], [5]]
    assert custom[0].mig_devices is None


def test_accepts_the_default_config_and_applies_filters_as_mig_parted_does() -> None:
    spec = validate(DEFAULT, strict=True)
    node = [A100_80, A100_40, A30, parse_device_id("0x294110DE")]
    applied = walk(select_config(spec, "all-1g.10gb"), node)
    assert {i: [e.mig_devices for e in es] for i, es in applied.items()} == {
        0: [{"1g.10gb": 7}], 1: [{"1g.10gb": 4}]}  # fmt: skip
    balanced = walk(select_config(spec, "all-balanced"), node)
    assert sorted(balanced) == [2, 3]  # the string filter matches the A30 alone
    assert balanced[2][0].device_filter == "0x20B710DE"
    # Filters off: every GPU matches.
    assert sorted(walk(select_config(spec, "all-1g.24gb-me"), node)) == [0, 1, 2, 3]


def test_selecting_a_config() -> None:
    spec = validate(EXAMPLE)
    with pytest.raises(SpecError, match="missing required flag 'selected-config'"):
        select_config(spec)
    with pytest.raises(SpecError, match="selected mig-config not present: nope"):
        select_config(spec, "nope")
    one = validate("version: v1\nmig-configs:\n  only:\n  - devices: all\n    mig-enabled: false\n")
    assert select_config(one)[0].mig_enabled is False
    # Version alone parses (mig-parted's own test) but gives nothing to apply.
    assert parse_spec(load_yaml("version: v1\n")).mig_configs == {}
    with pytest.raises(SpecError, match="selected mig-config not present"):
        select_config(validate("version: v1\n"), "gpuplan-all")
    # An empty file is an empty Spec for mig-parted's decoder, not an error.
    assert validate("").version == ""


ENTRY = "version: v1\nmig-configs:\n  c:\n  - {}\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("mig-configs:\n  c:\n  - devices: all\n    mig-enabled: false\n", "missing 'version'"),
        ("version: v2\n", "unknown version: v2"),
        (
            "version: v2\nmig-configs:\n  c:\n  - {devices: all, mig-enabled: false}\n",
            "unknown version: v2",
        ),
        ("{}\n", "unknown version: "),
        ("version: 1\n", "cannot unmarshal number into Go value of type string"),
        ("bogus: field\nversion: v1\n", "unexpected field: bogus"),
        ("version: v1\nmig-configs: {}\n", "at least one entry in 'mig-configs' is required"),
        ("version: v1\nmig-configs:\n", "at least one entry in 'mig-configs' is required"),
        ("version: v1\nmig-configs:\n  c: []\n", "at least one entry in 'c' is required"),
        ("version: v1\nmig-configs:\n  c:\n", "at least one entry in 'c' is required"),
        ("version: v1\nmig-configs: [a]\n", "cannot unmarshal array"),
        ("- a\n", "cannot unmarshal array"),
    ],
)
def test_refuses_bad_specs(text: str, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        validate(text)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"mig-enabled": True, "mig-devices": {"1g.5gb": 2}}, "missing required field: devices"),
        ({"devices": "all", "mig-devices": {"1g.5gb": 2}}, "missing required field: mig-enabled"),
        ({"devices": "all", "mig-enabled": True}, "'mig-devices' when 'mig-enabled' is true"),
        ({"devices": "all", "mig-enabled": True, "mig-devices": None}, "'mig-devices' when"),
        (
            {"devices": "all", "mig-enabled": False, "mig-devices": {"1g.5gb": 1}},
            "included when 'mig-enabled' is false",
        ),
        (
            {"devices": "all", "mig-enabled": True, "mig-devices": {"bogus": 2}},
            "invalid format for 'bogus'",
        ),
        ({"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": -1}}, "invalid count"),
        (
            {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": 0}},
            "all counts for all MigProfiles are 0",
        ),
        (
            {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": 1.5}},
            "cannot unmarshal number 1.5",
        ),
        (
            {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": "1"}},
            "cannot unmarshal string",
        ),
        ({"devices": "all", "mig-enabled": True, "mig-devices": [1]}, "cannot unmarshal array"),
        ({"bogus": "field", "devices": "all", "mig-enabled": False}, "unexpected field: bogus"),
        ({"devices": "bogus", "mig-enabled": False}, "invalid string input for 'devices': bogus"),
        ({"devices": None, "mig-enabled": False}, "invalid string input for 'devices': $"),
        ({"devices": {}, "mig-enabled": False}, "type \\[\\]int"),
        (
            {"devices": ["0"], "mig-enabled": False},
            "cannot unmarshal string into Go value of type int",
        ),
        ({"devices": [True], "mig-enabled": False}, "cannot unmarshal bool"),
        (
            {"devices": "all", "mig-enabled": "yes"},
            "cannot unmarshal string into Go value of type bool",
        ),
        ({"device-filter": 7, "devices": "all", "mig-enabled": False}, "type \\[\\]string"),
        ({"device-filter": [7], "devices": "all", "mig-enabled": False}, "cannot unmarshal number"),
        ({"Devices": "all", "mig-enabled": False}, "missing required field: devices"),
    ],
)
def test_refuses_bad_entries(entry: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        parse_config_spec(entry)


def test_accepts_what_mig_parted_accepts() -> None:
    ok = [
        {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": 2}},
        {
            "device-filter": "MODEL",
            "devices": "all",
            "mig-enabled": True,
            "mig-devices": {"1g.5gb": 2},
        },
        {"device-filter": ["MODEL1", "MODEL2"], "devices": "all", "mig-enabled": False},
        {"devices": [0, 1, 2, 3], "mig-enabled": False},
        {"devices": [], "mig-enabled": True, "mig-devices": {}},  # applies to no GPU
        {"devices": "all", "mig-enabled": False, "mig-devices": {}},
        {"devices": "all", "mig-enabled": True, "mig-devices": {"0g.0gb": 100}},  # format only
        {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": 2, "2g.10gb": 0}},
        {"devices": [2.0], "mig-enabled": True, "mig-devices": {"1g.5gb": 7.0}},  # integral floats
        {"devices": "all", "mig-enabled": None},  # JSON null leaves the bool false
    ]
    for entry in ok:
        parse_config_spec(entry)
    assert parse_config_spec({"devices": [2.0], "mig-enabled": False}).devices == [2]


def test_yaml_reading_follows_go_yaml() -> None:
    spec = validate("version: v1\nmig-configs:\n  c:\n  - devices: all\n    mig-enabled: n\n")
    assert spec.mig_configs["c"][0].mig_enabled is False  # go-yaml's YAML 1.1 booleans
    on = validate(
        "version: v1\nmig-configs:\n  c:\n  - {devices: all, mig-enabled: on, mig-devices: {}}\n"
    )
    assert on.mig_configs["c"][0].mig_enabled is True
    # Integer keys become strings; a profile named by a number is then a format error.
    with pytest.raises(SpecError, match="invalid format for '7'"):
        validate(
            "version: v1\nmig-configs:\n  c:\n  - {devices: all, mig-enabled: true, mig-devices: {7: 1}}\n"
        )
    duplicated = "version: v1\nmig-configs:\n  c:\n  - {devices: all, mig-enabled: false}\n  c:\n  - {devices: [1], mig-enabled: false}\n"
    assert validate(duplicated).mig_configs["c"][0].devices == [1]  # go-yaml keeps the last
    with pytest.raises(SpecError, match="duplicate key 'c'"):
        validate(duplicated, strict=True)
    with pytest.raises(SpecError, match="error converting YAML to JSON"):
        validate("version: [v1\n")


@pytest.mark.parametrize(
    ("name", "info"),
    [
        ("1g.5gb", MigProfileInfo(1, 1, 5)),
        ("7g.80gb", MigProfileInfo(7, 7, 80)),
        ("1c.3g.40gb", MigProfileInfo(1, 3, 40)),
        ("1g.10gb+me", MigProfileInfo(1, 1, 10, ("me",))),
        ("1g.24gb+me.all", MigProfileInfo(1, 1, 24, ("me.all",))),
        ("2g.48gb+gfx", MigProfileInfo(2, 2, 48, ("gfx",))),
        ("1g.24gb-me", MigProfileInfo(1, 1, 24, (), ("me",))),
        ("1c.1g.5gb+me", MigProfileInfo(1, 1, 5, ("me",))),
        ("1g.5gb+me,gfx", MigProfileInfo(1, 1, 5, ("me", "gfx"))),
        ("01g.005gb", MigProfileInfo(1, 1, 5)),
        ("0g.0gb", MigProfileInfo(0, 0, 0)),
    ],
)
def test_profile_grammar_accepts(name: str, info: MigProfileInfo) -> None:
    assert parse_mig_profile(name) == info


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "empty string"),
        ("bogus", "expected 2 or 3"),
        ("1g", "expected 2 or 3"),
        ("1g.5gb.x.y", "missing 'c'"),
        ("1x.5gb", "missing 'g'"),
        ("1g.5", "missing 'gb'"),
        ("g.5gb", "malformed number"),
        ("1.5g.5gb", "missing 'c'"),
        ("1g.5gb ", "leading or trailing spaces"),
        (" 1g.5gb", "leading or trailing spaces"),
        ("1g.5gb+me-x", "contains both"),
        ("1g.5gb+", "empty attribute"),
        ("1g.5gb+me,", "empty attribute"),
        ("1g.5gb+me,me", "non unique"),
        ("1g.5gb+1me", "begins with a number"),
        ("1g.5gb+.me", "begins/ends with a dot"),
        ("1g.5gb+me.", "begins/ends with a dot"),
        ("1g.5gb+m_e", "non alpha-numeric"),
        ("1g.5gb+ me", "leading or trailing spaces in attribute"),
        ("1g.5gb+mé", "non alpha-numeric"),
        ("1g.99999999999999999999gb", "malformed number"),
    ],
)
def test_profile_grammar_refuses(name: str, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        parse_mig_profile(name)


def test_device_ids_and_filters() -> None:
    assert parse_device_id("0x20B210DE") == DeviceID(0x20B2, 0x10DE)
    assert parse_device_id("0x20b210de") == DeviceID(0x20B2, 0x10DE)
    assert parse_device_id("0x20B2_10DE") == DeviceID(0x20B2, 0x10DE)  # base 0 allows `_`
    with_sub = parse_device_id("0x20B210DE:0x147E10DE")
    assert with_sub.has_subsystem
    assert (with_sub.subsystem_device, with_sub.subsystem_vendor) == (0x147E, 0x10DE)
    assert with_sub.matches(with_sub)
    assert not with_sub.matches(A100_80)  # a subsystem filter needs all four parts
    assert DeviceID(0x20B2, 0x10DE).matches(with_sub)
    for bad in ("A100-SXM4-40GB", "0x1FFFFFFFF", "1:2:3", "", "-1"):
        with pytest.raises(SpecError):
            parse_device_id(bad)
    # mig-parted accepts an unparsable filter; it then matches no GPU. Strict mode refuses it.
    text = 'version: v1\nmig-configs:\n  c:\n  - {device-filter: "A100-SXM4-40GB", devices: all, mig-enabled: false}\n'
    entries = select_config(validate(text))
    assert walk(entries, [A100_40]) == {}
    with pytest.raises(SpecError, match="device-filter"):
        validate(text, strict=True)


def test_profile_names_follow_go_nvlib_memory_rule() -> None:
    # A100 80GB (81920 MiB): 1g.10gb holds 9728 MiB; H100 80GB (81559 MiB) 3g.40gb 40448 MiB.
    assert mig_memory_size_gb(81920 * 2**20, 9728) == 10
    assert mig_memory_size_gb(81559 * 2**20, 40448) == 40
    # B200 (183359 MiB): 1g at 20992 MiB is 1/8 of 180 = 22.5, rounded half away from zero.
    assert mig_memory_size_gb(183359 * 2**20, 20992) == 23
    assert mig_memory_size_gb(183359 * 2**20, 182784) == 180
