"""Price tables and the price basis: every price dated and sourced, one stated basis per
answer, chosen providers, unpriced GPUs ranked apart, and overrides that win."""

import datetime
import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from click.testing import CliRunner
from litestar import Litestar
from litestar.testing import TestClient

from gpuplan.cli import main
from gpuplan.config.catalog import load_catalog
from gpuplan.core.catalog import (
    DEFAULT_PROVIDERS,
    PROVIDERS,
    Catalog,
    CatalogError,
    build_catalog,
    builtin_catalog,
    builtin_documents,
    builtin_price_tables,
    lowest,
)
from gpuplan.core.ci import CiPlan, check
from gpuplan.core.recommend import RecommendRequest, recommend
from gpuplan.core.recommend.schema import Candidate, RecommendResponse
from tests.helpers import LLAMA_TRAINING, problem_at

CATALOG = builtin_catalog()

SERVE_70B: dict[str, Any] = {
    "model": {"name": "llama-3.1-70b"},
    "workload": {"mode": "inference", "sequence_length": 2048},
    "inference": {"prompt_tokens": 2048, "output_tokens": 512, "requests_per_second": 5},
    "objective": "cheapest",
}
"""Llama 3.1 70B, 2048 in, 512 out, 5 requests/s, cheapest: the question the mixed
prices got wrong (B200 and H200 at a neocloud's price, H100 at AWS's)."""

COMMON = (
    "h100-sxm5-80gb",
    "h200-sxm-141gb",
    "b200-180gb",
    "a100-sxm4-40gb",
    "a100-sxm4-80gb",
    "l40s-48gb",
    "l4-24gb",
    "rtx-4090-24gb",
)


def ask(body: dict[str, Any], catalog: Catalog = CATALOG) -> RecommendResponse:
    return recommend(msgspec.convert(body, RecommendRequest), catalog)


def priced(answer: RecommendResponse) -> list[Candidate]:
    return [c for c in answer.recommendations if c.price is not None]


def table_price(gpu: str, provider: str, kind: str = "on_demand") -> float:
    quote = lowest(CATALOG.get(gpu), [provider], kind)  # type: ignore[list-item,arg-type]
    assert quote is not None, (gpu, provider, kind)
    return quote.usd_per_gpu_hour


# ---------------------------------------------------------------- the tables


def test_every_price_is_dated_sourced_and_of_a_known_provider() -> None:
    assert sorted(provider for _, provider, _ in builtin_price_tables()) == sorted(PROVIDERS)
    assert [p.id for p in CATALOG.providers] == list(PROVIDERS)
    quotes = [q for gpu in CATALOG for q in gpu.price.cloud]
    assert len(quotes) >= 50
    for q in quotes:
        assert q.as_of >= datetime.date(2026, 1, 1), q
        assert q.source.title, q
        assert q.source.url, q
        assert (q.kind == "reserved") == (q.term is not None), q
        if q.usd_per_instance_hour is not None:
            # The per-GPU price of an instance is its price over its GPUs, nothing else.
            assert q.usd_per_gpu_hour == pytest.approx(q.usd_per_instance_hour / q.gpus, abs=1e-6)
    # No built-in entry carries a price of unstated provider any more.
    assert all(g.price.cloud_on_demand is None for g in CATALOG)


def test_the_common_gpus_are_priced_across_at_least_four_providers() -> None:
    providers: set[str] = set()
    for gpu in COMMON:
        listed = {q.provider for q in CATALOG.get(gpu).price.cloud if q.kind == "on_demand"}
        assert listed, gpu
        providers |= listed
    assert len(providers) >= 4
    for gpu in ("h100-sxm5-80gb", "h200-sxm-141gb", "b200-180gb", "a100-sxm4-80gb"):
        assert len({q.provider for q in CATALOG.get(gpu).price.cloud}) >= 4, gpu
    assert {q.kind for g in CATALOG for q in g.price.cloud} == {"on_demand", "spot", "reserved"}


def test_the_audits_stale_prices_are_re_dated_or_gone() -> None:
    """Issue 36: RTX 5090 1.22, L4 0.78 and L40S 1.40 were RunPod via Deploybase, March 2026."""
    stale = datetime.date(2026, 3, 1)
    for gpu in ("rtx-5090-32gb", "l4-24gb", "l40s-48gb", "rtx-3090-24gb", "rtx-4090-24gb"):
        for q in CATALOG.get(gpu).price.cloud:
            assert q.as_of != stale, (gpu, q)
            assert "Deploybase" not in q.source.title, (gpu, q)
    assert table_price("rtx-5090-32gb", "runpod") == 0.99
    assert table_price("l40s-48gb", "runpod") == 1.09
    assert table_price("l4-24gb", "aws") == 0.8048


TABLE: dict[str, Any] = {
    "provider": {"name": "Test cloud", "method": "per GPU as listed"},
    "sources": {"page": {"title": "its page", "url": "https://example.test", "kind": "secondary"}},
    "price": [
        {
            "gpu": "h100-sxm5-80gb",
            "kind": "on_demand",
            "instance": "8x",
            "gpus": 8,
            "usd_per_instance_hour": 20.0,
            "as_of": datetime.date(2026, 11, 1),
            "source": "page",
        }
    ],
}


def _build(table: dict[str, Any], provider: str = "runpod") -> Catalog:
    return build_catalog(builtin_documents(), [("test table", provider, table)])


def _row(**changes: Any) -> dict[str, Any]:
    row = {**TABLE["price"][0], **changes}
    return {**TABLE, "price": [{k: v for k, v in row.items() if v is not None}]}


def test_the_loader_divides_an_instance_price_by_its_gpus() -> None:
    quote = _build(TABLE).get("h100-sxm5-80gb").price.cloud[0]
    assert (quote.provider, quote.usd_per_gpu_hour, quote.gpus) == ("runpod", 2.5, 8)


@pytest.mark.parametrize(
    ("table", "provider", "message"),
    [
        (_row(as_of=None), "runpod", r"price #1 \(`h100-sxm5-80gb`\): \$\.as_of: Object missing"),
        (_row(source=None), "runpod", r"\$\.source: every price names the source"),
        (_row(source="elsewhere"), "runpod", r"unknown source id 'elsewhere'"),
        (_row(gpu="h900"), "runpod", r"\$\.gpu: 'h900' is not a catalog id"),
        (_row(usd_per_gpu_hour=2.0), "runpod", "not both"),
        (_row(usd_per_instance_hour=None), "runpod", r"\$\.usd_per_gpu_hour: no price"),
        (
            _row(usd_per_instance_hour=-1.0),
            "runpod",
            r"\$\.usd_per_instance_hour: Expected `float` > 0",
        ),
        (_row(kind="reserved"), "runpod", r"\$\.term: a reserved price names its term"),
        (_row(kind="hourly"), "runpod", r"\$\.kind"),
        ({**TABLE, "price": TABLE["price"] * 2}, "runpod", "a second `on_demand` price"),
        ({**TABLE, "colour": 1}, "runpod", "unknown top-level key"),
        (TABLE, "vultr", "`vultr` is not a provider the schema knows"),
    ],
)
def test_the_loader_refuses_a_price_without_date_source_or_gpu(
    table: dict[str, Any], provider: str, message: str
) -> None:
    with pytest.raises(CatalogError, match=message) as info:
        _build(table, provider)
    assert "test table" in str(info.value)


# ---------------------------------------------------------------- one basis per answer


def test_cheapest_compares_prices_of_one_stated_basis() -> None:
    """Every priced candidate of the default answer is priced by the same table and
    kind, the one the answer states; with the old mixed data H100 was priced at AWS and
    H200/B200 at RunPod in one ranking."""
    answer = ask(SERVE_70B)
    basis = answer.price_basis
    assert (basis.providers, basis.kind, basis.default) == (
        list(DEFAULT_PROVIDERS),
        "on_demand",
        True,
    )
    assert "aws on_demand" in basis.detail
    ranked = priced(answer)
    assert {"h100-sxm5-80gb", "h200-sxm-141gb", "b200-180gb"} <= {c.gpu for c in ranked}
    for c in ranked:
        assert c.price is not None
        assert (c.price.provider, c.price.kind) == ("aws", "on_demand"), c.gpu
        assert c.price.usd_per_gpu_hour == table_price(c.gpu, "aws")
        assert c.price.as_of is not None
        assert c.price.source
        assert c.usd_per_hour == pytest.approx(c.price.usd_per_gpu_hour * c.count)
    assert set(basis.unpriced) == {c.gpu for c in answer.recommendations if c.price is None}


def test_choosing_providers_changes_the_answer_and_each_candidate_names_its_price() -> None:
    aws = ask(SERVE_70B)
    runpod = ask({**SERVE_70B, "pricing": {"providers": ["runpod"]}})
    assert runpod.price_basis.providers == ["runpod"]
    assert not runpod.price_basis.default
    assert all(c.price is not None and c.price.provider == "runpod" for c in priced(runpod))
    by_gpu = {c.gpu: c for c in priced(runpod)}
    assert by_gpu["h100-sxm5-80gb"].price.usd_per_gpu_hour == 3.99  # type: ignore[union-attr]
    # A GPU AWS does not rent out is priced (and scored) on RunPod's basis.
    assert "h100-nvl-94gb" in aws.price_basis.unpriced
    assert "h100-nvl-94gb" in by_gpu
    assert [c.gpu for c in priced(aws)] != [c.gpu for c in priced(runpod)]
    # Several providers: each GPU at the lowest of them, named.
    many = ask({**SERVE_70B, "pricing": {"providers": ["runpod", "lambda", "nebius"]}})
    for c in priced(many):
        assert c.price is not None
        lowest_of = min(
            q.usd_per_gpu_hour
            for q in CATALOG.get(c.gpu).price.cloud
            if q.provider in {"runpod", "lambda", "nebius"} and q.kind == "on_demand"
        )
        assert c.price.usd_per_gpu_hour == lowest_of
    providers = {c.price.provider for c in priced(many) if c.price}
    assert {"lambda", "nebius", "runpod"} <= providers


def test_spot_and_reserved_prices_name_their_kind_and_term() -> None:
    spot = ask({**SERVE_70B, "pricing": {"providers": ["together", "coreweave"], "kind": "spot"}})
    h100 = next(c for c in priced(spot) if c.gpu == "h100-sxm5-80gb")
    assert h100.price is not None
    assert (h100.price.provider, h100.price.kind, h100.price.usd_per_gpu_hour) == (
        "together",
        "spot",
        1.99,
    )
    reserved = ask({**SERVE_70B, "pricing": {"providers": ["together"], "kind": "reserved"}})
    assert {c.gpu for c in priced(reserved)} == {"h100-sxm5-80gb", "h200-sxm-141gb", "b200-180gb"}
    assert all(c.price and c.price.term == "91-180 days" for c in priced(reserved))


# ---------------------------------------------------------------- unpriced GPUs


@pytest.mark.parametrize("objective", ["cheapest", "balanced"])
def test_unpriced_plans_are_ranked_apart_never_scored_zero_among_priced_ones(
    objective: str,
) -> None:
    answer = ask({**SERVE_70B, "objective": objective})
    recs = answer.recommendations
    meets = [c for c in recs if c.fits and not c.breaches]
    unpriced = [c for c in meets if c.price is None]
    assert unpriced, "the AWS basis leaves some fitting GPUs unpriced"
    for c in unpriced:
        assert c.score is None, c.gpu
        assert any(r.startswith("unscored: no price on the basis") for r in c.reasons)
    scored = [c for c in meets if c.price is not None]
    assert all(c.score is not None and c.score > 0 for c in scored)
    # Every priced plan first, then the unpriced ones, then the misses at 0.
    order = [0 if c.score else 1 if c.score is None else 2 for c in recs]
    assert order == sorted(order)
    # Ranked among themselves by the objective's other term: time under balanced, and
    # under cheapest (no other term) by GPU-hours.
    if objective == "balanced":
        keys = [c.latency.request_latency_s for c in unpriced if c.latency]
    else:
        keys = [(c.time_hours or 0) * c.count for c in unpriced]
    assert keys == sorted(keys)


@pytest.mark.parametrize("objective", ["fastest", "energy"])
def test_objectives_without_a_cost_term_score_unpriced_gpus_like_any_other(objective: str) -> None:
    answer = ask({**SERVE_70B, "objective": objective})
    unpriced = [c for c in answer.recommendations if c.fits and not c.breaches and c.price is None]
    assert unpriced
    assert all(c.score is not None and c.score > 0 for c in unpriced)


def test_a_basis_that_prices_no_fitting_gpu_says_so() -> None:
    body = {**SERVE_70B, "constraints": {"include": ["mi300x-192gb", "h100-nvl-94gb"]}}
    answer = ask(body)
    assert all(c.score is None for c in answer.recommendations if c.fits)
    assert any("no fitting plan has a price on the basis" in w for w in answer.warnings)


# ---------------------------------------------------------------- overrides win


def test_the_requests_price_and_a_catalog_files_negotiated_price_win(tmp_path: Path) -> None:
    body = {
        **SERVE_70B,
        "constraints": {"prices": {"H100 SXM": {"cloud_usd_per_gpu_hour": 1.5}}},
        "pricing": {"providers": ["runpod"]},
    }
    h100 = next(c for c in ask(body).recommendations if c.gpu == "h100-sxm5-80gb")
    assert h100.price is not None
    assert (h100.price.provider, h100.price.usd_per_gpu_hour) == ("request", 1.5)
    path = tmp_path / "catalog.toml"
    path.write_text(
        '[[gpu]]\nid = "h200-sxm-141gb"\n[gpu.price.cloud_on_demand]\nusd_per_gpu_hour = 2.2\n'
        'as_of = 2026-11-20\nsource = "our 2026 contract"\n'
    )
    catalog = load_catalog(str(path))
    h200 = next(c for c in ask(SERVE_70B, catalog).recommendations if c.gpu == "h200-sxm-141gb")
    assert h200.price is not None
    assert (h200.price.provider, h200.price.usd_per_gpu_hour) == ("catalog_file", 2.2)
    assert h200.price.as_of == datetime.date(2026, 11, 20)
    # The tables stay listed, and a request's own price wins over the file's.
    assert catalog.get("h200-sxm-141gb").price.cloud
    mine = {
        **SERVE_70B,
        "constraints": {"prices": {"h200-sxm-141gb": {"cloud_usd_per_gpu_hour": 1.0}}},
    }
    h200 = next(c for c in ask(mine, catalog).recommendations if c.gpu == "h200-sxm-141gb")
    assert h200.price is not None
    assert h200.price.provider == "request"


# ---------------------------------------------------------------- every door


def test_a_bad_provider_is_refused_naming_its_path_with_the_closest(
    client: TestClient[Litestar],
) -> None:
    body = {**SERVE_70B, "pricing": {"providers": ["aws", "runpood"], "kind": "hourly"}}
    problem = problem_at(client.post("/v1/recommendations", json=body), "$.pricing.providers[1]")
    reasons = {e["path"]: e["reason"] for e in problem["errors"]}
    assert "did you mean `runpod`" in reasons["$.pricing.providers[1]"]
    assert "$.pricing.kind" in reasons
    plan = {**LLAMA_TRAINING, "targets": {"max_cost_usd": 100}, "pricing": {"providers": ["azur"]}}
    problem_at(client.post("/v1/plan", json=plan), "$.pricing.providers[0]")


def test_the_cli_takes_providers_and_exits_2_on_a_bad_one(tmp_path: Path) -> None:
    args = ["recommend", "--model", "llama-2-7b", "--mode", "inference", "--seq-len", "2048",
            "--objective", "cheapest", "--limit", "3"]  # fmt: skip
    result = CliRunner().invoke(main, [*args, "--provider", "lambda", "--format", "json"])
    assert result.exit_code == 0, result.output
    body = json.loads(result.output)
    assert body["price_basis"]["providers"] == ["lambda"]
    table = CliRunner().invoke(main, [*args, "--pricing-providers", "runpod"])
    assert table.exit_code == 0, table.output
    assert "prices: cloud prices per GPU-hour: runpod on_demand" in table.output
    assert " runpod " in table.output
    bad = CliRunner().invoke(main, [*args, "--pricing-kind", "hourly"])
    assert bad.exit_code == 2
    path = tmp_path / "request.yaml"
    path.write_text(json.dumps({**SERVE_70B, "pricing": {"providers": ["runpood"]}}))
    bad = CliRunner().invoke(main, ["recommend", "-f", str(path)])
    assert bad.exit_code == 2
    assert "$.pricing.providers[0]" in bad.output


def test_a_plan_files_cost_target_uses_the_basis() -> None:
    def plan(pricing: dict[str, Any]) -> Any:
        doc = {
            **LLAMA_TRAINING,
            "pricing": pricing,
            "targets": {"fits": {"gpu": "a100-sxm4-80gb", "count": 4}, "max_cost_usd": 1e6},
        }
        return check(msgspec.convert(doc, CiPlan), CATALOG)

    aws, runpod = plan({}), plan({"providers": ["runpod"]})
    costs = []
    for report, provider in ((aws, "aws"), (runpod, "runpod")):
        assert report.price_basis.providers == [provider]
        verdict = next(v for v in report.verdicts if v.target == "max_cost_usd")
        assert (
            f"{provider} on_demand ${table_price('a100-sxm4-80gb', provider):.2f}/GPU-h"
            in verdict.reason
        )
        costs.append(verdict.actual)
    # The same plan on the same GPUs, costed at each table's A100 price.
    ratio = table_price("a100-sxm4-80gb", "aws") / table_price("a100-sxm4-80gb", "runpod")
    assert costs[0] == pytest.approx(costs[1] * ratio)


def test_the_price_table_in_docs_is_the_data() -> None:
    """docs/catalog.md prints every table row; a changed price changes the page."""
    rows = [
        "| GPU | " + " | ".join(PROVIDERS) + " |",
        "| --- | " + " | ".join("---:" for _ in PROVIDERS) + " |",
    ]
    for gpu in CATALOG:
        if not gpu.price.cloud:
            continue
        cells = [
            "<br>".join(
                f"{q.usd_per_gpu_hour:.2f}"
                if q.kind == "on_demand"
                else f"{q.kind} {q.usd_per_gpu_hour:.2f}"
                for q in gpu.price.cloud
                if q.provider == provider
            )
            for provider in PROVIDERS
        ]
        rows.append(f"| `{gpu.id}` | " + " | ".join(cells) + " |")
    text = (Path(__file__).parents[1] / "docs" / "catalog.md").read_text(encoding="utf-8")
    printed = text.split("<!-- price-table -->\n", 1)[1].split("<!-- /price-table -->", 1)[0]
    assert printed.splitlines() == rows
