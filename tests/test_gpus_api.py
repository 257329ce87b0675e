"""GET /v1/gpus and /v1/gpus/{id_or_alias}, and catalog files merged at start-up."""

from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from litestar import Litestar
from litestar.testing import TestClient

from gpuplan.api.app import create_app
from gpuplan.config.catalog import load_catalog
from gpuplan.config.settings import Settings
from gpuplan.core.catalog import CatalogError
from tests.helpers import problem

GiB = 2**30


def _ids(body: dict[str, Any]) -> list[str]:
    return [g["id"] for g in body["gpus"]]


def test_list_all(client: TestClient[Litestar]) -> None:
    body = client.get("/v1/gpus").json()
    assert body["count"] == len(body["gpus"]) >= 30
    assert _ids(body) == sorted(_ids(body))


def test_filters_combine(client: TestClient[Litestar]) -> None:
    body = client.get(
        f"/v1/gpus?vendor=nvidia&min_memory_bytes={80 * GiB}&mig=true&precision=fp8"
    ).json()
    assert set(_ids(body)) == {"h100-pcie-80gb", "h100-sxm5-80gb", "h100-nvl-94gb", "h200-sxm-141gb",
                               "h200-nvl-141gb", "b200-180gb", "gb200-186gb", "gh200-96gb",
                               "rtx-pro-6000-server-96gb", "rtx-pro-6000-workstation-96gb",
                               "rtx-pro-6000-max-q-96gb", "h20-96gb", "gh200-144gb", "b300-288gb",
                               "gb300-288gb"}  # fmt: skip
    for gpu in body["gpus"]:
        assert gpu["vendor"] == "nvidia"
        assert gpu["mig"]["supported"]
        assert "fp8" in gpu["peak_flops"]


def test_repeated_vendor_and_mig_false(client: TestClient[Litestar]) -> None:
    body = client.get("/v1/gpus?vendor=amd&vendor=intel&mig=false").json()
    assert body["gpus"]
    assert all(g["vendor"] in ("amd", "intel") and not g["mig"]["supported"] for g in body["gpus"])


def test_sort_by_nested_numeric_field(client: TestClient[Litestar]) -> None:
    body = client.get("/v1/gpus?sort=peak_flops.bf16&order=desc").json()
    values = [g["peak_flops"].get("bf16") for g in body["gpus"]]
    present = [v for v in values if v is not None]
    assert present == sorted(present, reverse=True)
    # SKUs without bf16 (T4, V100) come last, whatever the order.
    assert values[len(present) :] == [None] * (len(values) - len(present))
    assert body["gpus"][-1]["id"] in {"t4-16gb", "v100-sxm2-16gb", "v100-sxm2-32gb"}


def _quote(gpu: dict[str, Any], provider: str, kind: str = "on_demand") -> float | None:
    listed = [
        q for q in gpu["price"].get("cloud", []) if (q["provider"], q["kind"]) == (provider, kind)
    ]
    return listed[0]["usd_per_gpu_hour"] if listed else None


def test_sort_by_price_reads_one_basis_and_puts_unpriced_last(client: TestClient[Litestar]) -> None:
    """The price sort compares one provider's prices (default AWS on-demand) and says so."""
    body = client.get("/v1/gpus?sort=price.cloud.usd_per_gpu_hour").json()
    assert body["price_basis"].startswith("on_demand prices of aws")
    prices = [_quote(g, "aws") for g in body["gpus"]]
    known = [p for p in prices if p is not None]
    assert len(known) >= 7
    assert known == sorted(known)
    assert prices[: len(known)] == known
    # Another provider's basis orders by its prices, and only GPUs it lists come first.
    body = client.get(
        "/v1/gpus?sort=price.cloud.usd_per_gpu_hour&price_provider=runpod&order=desc"
    ).json()
    prices = [_quote(g, "runpod") for g in body["gpus"]]
    known = [p for p in prices if p is not None]
    assert known == sorted(known, reverse=True)
    assert prices[: len(known)] == known
    assert "rtx-4090-24gb" in [g["id"] for g in body["gpus"][: len(known)]]


def test_each_gpu_lists_every_providers_dated_price(client: TestClient[Litestar]) -> None:
    h100 = client.get("/v1/gpus/h100-sxm5-80gb").json()
    providers = {q["provider"] for q in h100["price"]["cloud"]}
    assert {"aws", "azure", "gcp", "lambda", "runpod", "coreweave"} <= providers
    for q in h100["price"]["cloud"]:
        assert q["as_of"], q
        assert q["source"]["title"], q
        assert q["source"]["url"], q
    aws = next(q for q in h100["price"]["cloud"] if q["provider"] == "aws")
    assert (aws["instance"], aws["gpus"], aws["usd_per_gpu_hour"]) == ("p5.48xlarge", 8, 6.88)


@pytest.mark.parametrize(
    ("query", "field"),
    [("sort=colour", "$.sort"), ("vendor=ibm", "$.vendor[0]"), ("min_memory_bytes=-1", "$.min_memory_bytes"),
     ("precision=fp128", "$.precision[0]"), ("mig=maybe", "$.mig"), ("color=red", "$.color"),
     ("price_provider=runpood", "$.price_provider[0]"), ("price_kind=hourly", "$.price_kind")],
)  # fmt: skip
def test_bad_filters_are_422(client: TestClient[Litestar], query: str, field: str) -> None:
    response = client.get(f"/v1/gpus?{query}")
    assert response.status_code == 422
    assert response.json()["errors"][0]["path"] == field


@pytest.mark.parametrize(
    "name",
    [
        "h100-sxm5-80gb",
        "NVIDIA H100 80GB HBM3",
        "NVIDIA-H100-80GB-HBM3",
        "0x2330",
        "10de:2330",
        "H100 SXM",
    ],
)
def test_get_by_any_name(client: TestClient[Litestar], name: str) -> None:
    response = client.get(f"/v1/gpus/{quote(name)}")
    assert response.status_code == 200, response.text
    gpu = response.json()
    assert gpu["id"] == "h100-sxm5-80gb"
    assert gpu["memory_bytes"] == 80 * GiB
    assert gpu["peak_flops"]["bf16"] == 989.5e12
    assert gpu["interconnect"]["gpu_link"]["per_direction_bytes_per_s"] == 450e9
    assert gpu["sources"]["peak_flops"][0]["title"]


def test_unknown_gpu_is_404_with_suggestions(client: TestClient[Litestar]) -> None:
    body = problem(client.get("/v1/gpus/h100"), 404)
    assert body["type"] == "urn:gpuplan:problem:unknown-gpu"
    assert "h100-sxm5-80gb" in body["suggestions"]
    assert "h100-sxm5-80gb" in body["detail"]


OVERRIDE = """
[sources.our-contract]
title = "Our 2026 reserved-capacity contract"
kind = "primary"

[[gpu]]
id = "h100-sxm5-80gb"
[gpu.price.cloud_on_demand]
usd_per_gpu_hour = 1.85
as_of = 2026-11-01
source = "our-contract: reserved H100 SXM"

[[gpu]]
id = "internal-x1"
vendor = "nvidia"
name = "Internal X1 accelerator"
architecture = "Hopper (GH100)"
aliases = ["X1"]
memory_bytes = 51_539_607_552
usable_memory_bytes = 50_000_000_000
memory_type = "HBM3"
memory_bandwidth_bytes_per_s = 2_000_000_000_000
peak_flops = { bf16 = 400e12, fp32 = 50e12 }
tdp_watts = 500
form_factor = "pcie"
launch_year = 2026
interconnect = { pcie = { generation = 5, lanes = 16 } }
mig = { supported = false, max_instances = 0 }
[gpu.sources]
memory_bytes = "our-contract"
usable_memory_bytes = "our-contract"
memory_type = "our-contract"
memory_bandwidth_bytes_per_s = "our-contract"
peak_flops = "our-contract"
tdp_watts = "our-contract"
interconnect = "our-contract"
mig = "our-contract"
launch_year = "our-contract"
"""


def test_catalog_file_overrides_and_adds(tmp_path: Path) -> None:
    path = tmp_path / "catalog.toml"
    path.write_text(OVERRIDE)
    with TestClient(app=create_app(Settings(catalog_file=str(path)))) as client:
        h100 = client.get("/v1/gpus/h100-sxm5-80gb").json()
        assert h100["price"]["cloud_on_demand"]["usd_per_gpu_hour"] == 1.85
        assert _quote(h100, "aws") == 6.88  # the tables' prices stay listed beside it
        assert h100["peak_flops"]["bf16"] == 989.5e12  # untouched fields stay
        # The negotiated price wins in the price sort too: the cheapest data-centre GPU.
        ordered = client.get(
            "/v1/gpus?sort=price.cloud.usd_per_gpu_hour&min_memory_bytes=85899345920"
        ).json()
        assert ordered["gpus"][0]["id"] == "h100-sxm5-80gb"
        x1 = client.get("/v1/gpus/x1").json()
        assert x1["id"] == "internal-x1"
        assert x1["interconnect"]["pcie"]["per_direction_bytes_per_s"] == 63_015_384_615


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[[gpu]]\nid = "h100-sxm5-80gb"\ntdp_watts = -5\n', r"entry `h100-sxm5-80gb`: \$\.tdp_watts"),
        ('[[gpu]]\nid = "h100-sxm5-80gb"\n[gpu.price.cloud_on_demand]\nusd_per_gpu_hour = 2.0\nsource = "x"\n',
         r"entry `h100-sxm5-80gb`: \$\.price\.cloud_on_demand\.as_of: Object missing required field `as_of`"),
        ('[[gpu]]\nid = "new-one"\nvendor = "nvidia"\n', r"entry `new-one`: .*missing required field"),
        ('[[gpu]]\nid = "h100-sxm5-80gb"\nusable_memory_bytes = 999_999_999_999\n', "usable_memory_bytes exceeds"),
        ('[[gpu]]\nid = "h100-sxm5-80gb"\naliases = ["A100 80GB"]\n', "names both"),
        ('[[gpu]]\nid = "h100-sxm5-80gb"\n[gpu.sources]\ntdp_watts = "nope"\n', r"unknown source id"),
        ("[[gpu]]\nname = 3\n", "needs a string `id`"),
        ("colour = 1\n", "unknown top-level key"),
        ('[[gpu]]\nid = "h100-sxm5-80gb"\n[[gpu.price.cloud]]\nprovider = "aws"\n',
         r"entry `h100-sxm5-80gb`: \$\.price\.cloud comes from the providers' price tables"),
    ],
)  # fmt: skip
def test_catalog_file_errors_name_file_entry_and_field(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "overrides.toml"
    path.write_text(text)
    with pytest.raises(CatalogError, match=message) as info:
        load_catalog(str(path))
    assert str(path) in str(info.value)


def test_unreadable_catalog_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="cannot read"):
        load_catalog(str(tmp_path / "missing.yaml"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("gpu: [\n")
    with pytest.raises(CatalogError, match="not valid YAML"):
        load_catalog(str(bad))
