"""The planner page and the API reference in a real browser: Debian's Chromium, driven by
Playwright (``executable_path``; Playwright downloads no browser), against a real
``gpuplan serve``. The page must draw the API's own figures, take a new plan from its
forms, and never make a request outside the service's origin.

Screenshots (1280×800) are kept under ``.artifacts/ui/`` (``GPUPLAN_UI_ARTIFACTS``
overrides); docs/ui.md shows copies of them. Skipped only where no Chromium is installed.
"""

import json
import os
import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, Request, sync_playwright

from tests.helpers import TINY_LLAMA
from tests.test_serve import serving

pytestmark = [pytest.mark.slow, pytest.mark.browser]

CHROMIUM = os.environ.get("GPUPLAN_CHROMIUM") or next(
    filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None
)
if CHROMIUM is None:
    pytest.skip(
        "no Chromium installed (apt-get install chromium; .ci/run does): the browser tests need one",
        allow_module_level=True,
    )

ARTIFACTS = Path(
    os.environ.get("GPUPLAN_UI_ARTIFACTS", Path(__file__).parent.parent / ".artifacts" / "ui")
)
VIEWPORT = {"width": 1280, "height": 800}
# A fresh profile that talks to nothing but the page: no updates, sync or field trials.
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--no-first-run",
    "--no-default-browser-check",
    "--metrics-recording-only",
]
GIB = 1024**3

PLAN = (
    "/ui?view=memory&model=llama-3.1-8b&mode=finetune_qlora&batch_size=2&sequence_length=4096"
    "&gradient_checkpointing=full&gpu=l4-24gb&objective=fastest&training_tokens=500000000"
    "&mig_gpu=h100-sxm5-80gb&mw=llm:35:2&mw=notebook:1g.10gb:3"
)
JOB: dict[str, Any] = {
    "model": {"name": "llama-3.1-8b"},
    "workload": {
        "mode": "finetune_qlora",
        "batch_size": 2,
        "sequence_length": 4096,
        "gradient_checkpointing": "full",
    },
}
MIG = {
    "gpu": "h100-sxm5-80gb",
    "workloads": [
        {"name": "llm", "memory_gib": 35, "count": 2},
        {"name": "notebook", "profile": "1g.10gb", "count": 3},
    ],
}


def _post(base: str, path: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(
        base + path, json.dumps(body).encode(), {"content-type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.load(answer)


def _gib(n: int) -> str:
    return f"{n / GIB:.2f} GiB"


def _get(base: str, path: str) -> Any:
    with urllib.request.urlopen(base + path, timeout=30) as answer:
        return json.load(answer)


def _names(base: str) -> dict[str, str]:
    """The catalog's full GPU names by id."""
    return {g["id"]: g["name"] for g in _get(base, "/v1/gpus")["gpus"]}


class Watched:
    """A page with every request, console error, page error and CSP violation recorded."""

    def __init__(self, browser: Browser, base: str) -> None:
        self.base = base
        self.context = browser.new_context(viewport=VIEWPORT)  # type: ignore[arg-type]
        self.page: Page = self.context.new_page()
        self.requests: list[str] = []
        self.posted: dict[str, list[Any]] = {}
        """The JSON bodies the page POSTed, by path."""
        self.errors: list[str] = []
        self.page.add_init_script(
            "document.addEventListener('securitypolicyviolation', e =>"
            " console.error('CSP violation: ' + e.violatedDirective + ' ' + e.blockedURI))"
        )
        self.page.on("request", self._request)
        self.page.on("console", self._console)
        self.page.on("pageerror", lambda error: self.errors.append(f"page error: {error}"))

    def _request(self, request: Request) -> None:
        self.requests.append(request.url)
        if request.method == "POST":
            self.posted.setdefault(urlsplit(request.url).path, []).append(request.post_data_json)

    def _console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.errors.append(message.text)

    def open(self, path: str) -> None:
        self.page.goto(self.base + path)
        self.ready()

    def ready(self) -> None:
        self.page.wait_for_selector("body[data-ready=true]", timeout=30_000)

    def shot(self, name: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        self.page.screenshot(path=str(path))
        return path

    def check_clean(self) -> None:
        """Nothing left the origin, and nothing failed or was blocked."""
        strangers = [url for url in self.requests if not url.startswith(self.base + "/")]
        assert not strangers, strangers
        assert not self.errors, self.errors
        self.context.close()


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with serving() as base:
        yield base


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        yield chromium
        chromium.close()


@pytest.fixture
def watched(browser: Browser, server: str) -> Iterator[Watched]:
    w = Watched(browser, server)
    yield w
    w.check_clean()


def _check_memory(page: Page, answer: dict[str, Any]) -> None:
    chart = page.get_by_test_id("memory-chart")
    legend = {
        item.get_attribute("data-field"): int(item.get_attribute("data-bytes") or "-1")
        for item in chart.locator(".legend li").all()
    }
    # The framework overhead is the sum of the four fields after it: not a bar of its own.
    aggregate = {"framework_overhead_bytes"} if "context_bytes" in answer["breakdown"] else set()
    parts = {k: v for k, v in answer["breakdown"].items() if v > 0 and k not in aggregate}
    headroom = answer["required_bytes"] - sum(parts.values())
    assert legend == {**parts, "headroom": headroom}
    bars = chart.locator("rect.part")
    assert bars.count() == len(legend)
    fit = answer["fit"]
    usable = chart.locator("line.limit")
    assert int(usable.get_attribute("data-bytes") or "-1") == fit["usable_memory_bytes"]
    verdict = page.locator("#verdict").inner_text()
    assert verdict.startswith("Fits" if fit["fits"] else "Does not fit")
    assert _gib(fit["required_bytes"]) in verdict
    assert _gib(fit["usable_memory_bytes"]) in verdict
    # The text alternative: a table with the same bytes.
    rows = chart.locator("#memory-table table.parts tbody tr")
    assert rows.count() == len(legend) + 2  # the parts, required, usable
    for field, value in legend.items():
        cell = chart.locator(f'#memory-table table.parts tr[data-field="{field}"] td').first
        assert cell.text_content() == str(value)
    # How sure: the headroom's size is the answer's, the bar above the parts is the 90%
    # range of the device bytes (its high end what "fits" is judged on), and the table
    # lists every range.
    headroom_text = chart.locator('.legend li[data-field="headroom"]').inner_text()
    assert f"+{answer['headroom_fraction'] * 100:.1f}%" in headroom_text
    ranges = answer["intervals"]
    assert ranges, "the analytic estimate gives 90% ranges"
    assert "95% confidence" in verdict
    assert "95% confidence" in headroom_text
    drawn = chart.locator('g.err.range[data-figure="device_bytes"]')
    assert drawn.count() == 1
    assert int(drawn.get_attribute("data-low") or -1) == ranges["device_bytes"]["low"]
    assert int(drawn.get_attribute("data-high") or -1) == ranges["device_bytes"]["high"]
    assert ranges["device_bytes"]["high"] == answer["required_bytes"]
    listed = {
        r.get_attribute("data-field"): {
            "low": int(r.get_attribute("data-low") or -1),
            "high": int(r.get_attribute("data-high") or -1),
        }
        for r in chart.locator("#memory-table table.ranges tbody tr").all()
    }
    assert listed == ranges
    assert "90% range of what nvidia-smi will show" in (
        page.locator("#memory-caption").text_content() or ""
    )


def _check_ranking(
    page: Page, answer: dict[str, Any], keys: tuple[str, ...] = ("time_hours", "cost_usd")
) -> None:
    table = page.get_by_test_id("gpu-table")
    rows = table.locator("tbody tr")
    shown = [
        (r.get_attribute("data-gpu"), int(r.get_attribute("data-count") or 0)) for r in rows.all()
    ]
    assert shown == [(c["gpu"], c["count"]) for c in answer["recommendations"]]
    for row, candidate in zip(rows.all(), answer["recommendations"], strict=True):
        # The GPU by its full name.
        assert row.locator('[data-key="gpu"]').inner_text() == candidate["name"]
        for key in ("required_bytes_per_gpu", *keys, "score"):
            value = row.locator(f'[data-key="{key}"]').get_attribute("data-value")
            expected = candidate[key] if key in candidate else candidate["latency"][key]
            assert (value in (None, "") and expected is None) or float(value or 0) == expected, key
            # Under a figure, its 80% range where the answer gives one.
            bounds = row.locator(f'[data-key="{key}"] .range')
            if key in candidate["intervals"]:
                assert (
                    float(bounds.get_attribute("data-low") or 0)
                    == candidate["intervals"][key]["low"]
                )
                assert (
                    float(bounds.get_attribute("data-high") or 0)
                    == candidate["intervals"][key]["high"]
                )
            else:
                assert bounds.count() == 0, key


def _figure(candidate: dict[str, Any], key: str) -> float | None:
    value = candidate[key] if key in candidate else (candidate["latency"] or {}).get(key)
    return value if isinstance(value, int | float) else None


def _check_chart(page: Page, answer: dict[str, Any], x: str, y: str) -> list[tuple[float, float]]:
    """The chart has a dot for each fitting plan that has both figures, at its values,
    and a bar for each figure's 80% range the answer gives; returns the dots."""
    plotted = [
        c
        for c in answer["recommendations"]
        if c["fits"] and (_figure(c, x) or 0) > 0 and (_figure(c, y) or 0) > 0
    ]
    chart = page.get_by_test_id("gpu-scatter")
    dots = chart.locator("circle.dot")
    assert dots.count() == len(plotted)
    drawn = {
        (d.get_attribute("data-gpu"), int(d.get_attribute("data-count") or 0)): (
            float(d.get_attribute("data-x") or 0),
            float(d.get_attribute("data-y") or 0),
        )
        for d in dots.all()
    }
    assert drawn == {(c["gpu"], c["count"]): (_figure(c, x), _figure(c, y)) for c in plotted}
    bars = {
        (
            b.get_attribute("data-gpu"),
            int(b.get_attribute("data-count") or 0),
            b.get_attribute("data-axis"),
        ): (
            float(b.get_attribute("data-low") or 0),
            float(b.get_attribute("data-high") or 0),
        )
        for b in chart.locator("g.err").all()
    }
    expected = {
        (c["gpu"], c["count"], axis): (c["intervals"][key]["low"], c["intervals"][key]["high"])
        for c in plotted
        for axis, key in (("x", x), ("y", y))
        if key in c["intervals"]
    }
    assert expected, "the answer gives 80% ranges"
    assert bars == expected
    assert "80% likely range" in (page.locator("#scatter-caption").text_content() or "")
    return list(drawn.values())


def _check_mig(page: Page, answer: dict[str, Any]) -> None:
    layout = page.get_by_test_id("mig-layout")
    for gpu in answer["gpus"]:
        group = layout.locator(f'g[data-gpu-index="{gpu["index"]}"]')
        instances = [
            (
                i.get_attribute("data-workload"),
                i.get_attribute("data-profile"),
                int(i.get_attribute("data-start") or -1),
                int(i.get_attribute("data-size") or -1),
            )
            for i in group.locator("g.instance").all()
        ]
        assert instances == [
            (i["workload"], i["profile"], i["start"], i["size"]) for i in gpu["instances"]
        ]
    assert layout.locator("g[data-gpu-index]").count() == answer["gpus_used"]
    assert page.locator("#mig-yaml").text_content() == answer["mig_parted_config"]


def test_a_shared_plan_draws_the_apis_figures(watched: Watched, server: str) -> None:
    page = watched.page
    watched.open(PLAN)
    estimate = _post(server, "/v1/memory/estimate", {**JOB, "gpu": "l4-24gb"})
    asked = {
        **JOB,
        "objective": "fastest",
        "constraints": {"preferred_gpu": "l4-24gb"},
        "training": {"training_tokens": 500_000_000},
    }
    # The page asks for advice on the GPU of its fit.
    assert watched.posted["/v1/recommendations"] == [asked]
    ranking = _post(server, "/v1/recommendations", asked)
    mig = _post(server, "/v1/mig/plan", MIG)

    _check_memory(page, estimate)
    assert ranking["advice_gpu"] == "l4-24gb"
    items = page.locator("#advice li")
    assert items.count() == max(len(ranking["advice"]), 1)
    if ranking["advice"]:
        changes = [i.get_attribute("data-change") for i in items.all()]
        assert changes == [a["change"] for a in ranking["advice"]]
        assert {i.get_attribute("data-gpu") for i in items.all()} == {"l4-24gb"}
    else:
        assert "fits one NVIDIA L4" in items.first.inner_text()
    assert "NVIDIA L4" in page.locator("#advice-for").inner_text()
    watched.shot("memory")

    page.get_by_role("tab", name="GPUs").click()
    assert page.get_by_test_id("gpu-table").is_visible()
    assert "view=gpus" in page.url
    # No global batch in the plan: the recipe's default, and its warning, are shown.
    warnings = page.locator("#ranking-warnings li")
    assert [w.inner_text() for w in warnings.all()] == ranking["warnings"]
    assert any(w.startswith("no global batch stated") for w in ranking["warnings"])
    _check_ranking(page, ranking)
    _check_chart(page, ranking, "time_hours", "cost_usd")
    watched.shot("gpus")

    # Sorting by the keyboard: the cost heading, then Enter.
    page.locator('#gpu-table thead button[data-key="cost_usd"]').focus()
    page.keyboard.press("Enter")
    costs = [
        float(v)
        for v in page.locator('#gpu-table tbody [data-key="cost_usd"]').evaluate_all(
            "cells => cells.map(c => c.dataset.value)"
        )
        if v not in ("", None)
    ]
    assert costs == sorted(costs)
    assert page.locator("#gpu-table th[aria-sort=ascending]").inner_text().startswith("cost")

    # The tabs follow the arrow keys.
    page.get_by_role("tab", name="GPUs").focus()
    page.keyboard.press("ArrowRight")
    assert page.get_by_role("tab", name="MIG").get_attribute("aria-selected") == "true"
    _check_mig(page, mig)
    watched.shot("mig")


def test_the_forms_make_a_new_plan_and_its_link(watched: Watched, server: str) -> None:
    page = watched.page
    watched.open(PLAN)
    page.get_by_label("batch size", exact=True).fill("8")
    page.get_by_label("GPU for the fit").select_option("h100-sxm5-80gb")
    page.get_by_label("Global batch (sequences per step)").fill("64")
    page.get_by_role("button", name="Plan", exact=True).click()
    page.wait_for_url("**batch_size=8**")
    watched.ready()
    query = parse_qs(urlsplit(page.url).query)
    assert query["batch_size"] == ["8"]
    assert query["gpu"] == ["h100-sxm5-80gb"]
    assert query["global_batch_size"] == ["64"]
    sent = watched.posted["/v1/recommendations"][-1]
    assert sent["constraints"] == {"preferred_gpu": "h100-sxm5-80gb"}
    assert sent["training"] == {"training_tokens": 500_000_000, "global_batch_size": 64}
    job = {**JOB, "workload": {**JOB["workload"], "batch_size": 8}}
    _check_memory(page, _post(server, "/v1/memory/estimate", {**job, "gpu": "h100-sxm5-80gb"}))

    page.get_by_role("tab", name="MIG").click()
    page.get_by_role("button", name="Add a workload").click()
    page.locator("#mig-rows tr").last.locator("input").nth(0).fill("batch")
    page.locator("#mig-rows tr").last.locator("input").nth(1).fill("2g.20gb")
    page.locator("#mig-rows tr").last.locator("input").nth(2).fill("2")
    page.get_by_role("button", name="Plan MIG").click()
    page.wait_for_url("**mw=batch**")
    watched.ready()
    mig = {
        **MIG,
        "workloads": [*MIG["workloads"], {"name": "batch", "profile": "2g.20gb", "count": 2}],
    }
    _check_mig(page, _post(server, "/v1/mig/plan", mig))

    # The link opens the same plan again, in a new page.
    link = page.url
    again = watched.context.new_page()
    again.goto(link)
    again.wait_for_selector("body[data-ready=true]", timeout=30_000)
    assert again.locator("#mig-yaml").text_content() == page.locator("#mig-yaml").text_content()
    again.close()


SERVING = (
    "/ui?view=gpus&model=qwen2.5-72b&mode=inference&sequence_length=1300&objective=cheapest"
    "&requests_per_second=2&prompt_tokens=1000&output_tokens=300"
)
INCLUDED = ["a100-sxm4-80gb", "h100-sxm5-80gb", "h200-sxm-141gb", "l40s-48gb", "b200-180gb",
            "a10g-24gb", "l4-24gb"]  # fmt: skip


def test_a_serving_plan_sends_every_field_and_plots_cost_against_latency(
    watched: Watched, server: str
) -> None:
    """72B serving: latency targets, period, GPUs included and excluded, a GPU cap and a
    price basis, each set in the form, sent, kept in the link; the chart plots each plan's
    cost of the period against a latency it differs in, with the 80% ranges as bars."""
    page = watched.page
    names = _names(server)
    watched.open(SERVING)
    # Every GPU select shows the catalog's full names, the ids their values.
    for select in ("gpu", "include", "exclude", "mig_gpu"):
        options = page.locator(f"#{select} option").all()
        shown = {
            o.get_attribute("value") or "": o.text_content() or ""
            for o in options
            if o.get_attribute("value")
        }
        assert shown, select
        assert all(text.startswith(names[gpu]) for gpu, text in shown.items()), select
    assert (
        page.locator('#include option[value="h100-sxm5-80gb"]').text_content()
        == "NVIDIA H100 SXM5 80GB"
    )

    page.get_by_label("Longest time to first token (s)").fill("0.5")
    page.get_by_label("Longest time per output token (s)").fill("0.2")
    page.get_by_label("Period (hours)").fill("200")
    page.get_by_text("Which GPUs, how many").click()
    page.get_by_label("Only these GPUs").select_option(INCLUDED)
    page.get_by_label("Never these GPUs").select_option(["l4-24gb"])
    page.get_by_label("At most GPUs per plan").fill("8")
    page.get_by_label("Cloud prices from").select_option(["aws", "lambda"])
    page.get_by_label("Price kind").select_option("on_demand")
    page.get_by_role("button", name="Plan", exact=True).click()
    page.wait_for_url("**max_gpus_per_job=8**")
    watched.ready()
    included = sorted(INCLUDED, key=names.__getitem__)  # the select's order: by name
    sent = watched.posted["/v1/recommendations"][-1]
    # The form sends the workload fields it shows (at their defaults); those of the link:
    assert sent["workload"]["mode"] == "inference"
    assert sent["workload"]["sequence_length"] == 1300
    asked = {
        "model": {"name": "qwen2.5-72b"},
        "workload": sent["workload"],
        "objective": "cheapest",
        "constraints": {"include": included, "exclude": ["l4-24gb"], "max_gpus_per_job": 8},
        "pricing": {"providers": ["aws", "lambda"], "kind": "on_demand"},
        "inference": {
            "requests_per_second": 2,
            "prompt_tokens": 1000,
            "output_tokens": 300,
            "duration_hours": 200,
            "max_time_to_first_token_s": 0.5,
            "max_time_per_output_token_s": 0.2,
        },
    }
    assert sent == asked
    query = parse_qs(urlsplit(page.url).query)
    assert query["include"] == included
    assert query["exclude"] == ["l4-24gb"]
    assert query["provider"] == ["aws", "lambda"]
    for key, value in (("max_gpus_per_job", "8"), ("price_kind", "on_demand"),
                       ("duration_hours", "200"), ("max_time_to_first_token_s", "0.5"),
                       ("max_time_per_output_token_s", "0.2")):  # fmt: skip
        assert query[key] == [value], key
    ranking = _post(server, "/v1/recommendations", asked)
    _check_ranking(page, ranking, ("time_to_first_token_s", "time_per_output_token_s", "cost_usd"))
    # The percentiles under the request rate, each p50 with its 80% range, and the engine's
    # command of the best fitting plan.
    rows = page.get_by_test_id("gpu-table").locator("tbody tr").all()
    for row, candidate in zip(rows, ranking["recommendations"], strict=True):
        under = (candidate["latency"] or {}).get("under_load")
        for key, figure in (
            ("ttft_p50_s", "time_to_first_token_s"),
            ("tpot_p50_s", "time_per_output_token_s"),
        ):
            cell = row.locator(f'[data-key="{key}"]')
            if under is None:
                assert cell.get_attribute("data-value") in (None, "")
                continue
            assert float(cell.get_attribute("data-value") or 0) == under[figure]["p50"]
            assert cell.inner_text().count(" / ") == 2
            if key in candidate["intervals"]:
                low = cell.locator(".range").get_attribute("data-low")
                assert float(low or 0) == candidate["intervals"][key]["low"]
    top = next(c for c in ranking["recommendations"] if c["fits"] and c.get("launch"))
    assert page.get_by_test_id("launch").is_visible()
    assert page.locator("#launch-command").inner_text() == top["launch"]["shell"]
    assert top["launch"]["engine"] in (page.locator("#launch-caption").inner_text())

    # A target is set on the time per output token: the chart plots against it, the
    # target a dashed line; the plans differ along it (not all at the period's hours).
    chart = page.get_by_test_id("gpu-scatter")
    assert page.get_by_label("Plot the cost against").input_value() == "tpot"
    dots = _check_chart(page, ranking, "time_per_output_token_s", "cost_usd")
    assert len({x for x, _ in dots}) > 1
    assert len({y for _, y in dots}) > 1
    assert float(chart.locator("line.target").get_attribute("data-x") or 0) == 0.2
    caption = page.locator("#scatter-caption").text_content() or ""
    assert caption.startswith("cost of 200 h (USD) against time per output token (s)")
    watched.shot("gpus-serving")
    # The reader may plot it against the time to first token instead; the link keeps it.
    page.get_by_label("Plot the cost against").select_option("ttft")
    assert parse_qs(urlsplit(page.url).query)["chart_x"] == ["ttft"]
    dots = _check_chart(page, ranking, "time_to_first_token_s", "cost_usd")
    assert len({x for x, _ in dots}) > 1
    assert float(chart.locator("line.target").get_attribute("data-x") or 0) == 0.5

    # The link asks the same again, in a new page.
    again = watched.context.new_page()
    resent: list[Any] = []
    again.on(
        "request",
        lambda r: (
            resent.append(r.post_data_json) if r.url.endswith("/v1/recommendations") else None
        ),
    )
    again.goto(page.url)
    again.wait_for_selector("body[data-ready=true]", timeout=30_000)
    # (the workload fields at their defaults are left out of the link, so not sent)
    assert resent == [{**asked, "workload": {"mode": "inference", "sequence_length": 1300}}]
    assert again.locator("#chart_x").input_value() == "ttft"
    checked = again.locator("#include option:checked").evaluate_all("os => os.map(o => o.value)")
    assert checked == included
    again.close()


BAD = [
    # (the link's extra fields, the input, the path the 422 names)
    (SERVING + "&max_gpus_per_job=0", "max_gpus_per_job", "$.constraints.max_gpus_per_job"),
    (SERVING + "&include=no-such-gpu", "include", "$.constraints.include[0]"),
    (SERVING + "&price_kind=bogus", "price_kind", "$.pricing.kind"),
    (SERVING + "&provider=nowhere", "provider", "$.pricing.providers[0]"),
    (SERVING + "&max_time_to_first_token_s=0", "max_time_to_first_token_s",
     "$.inference.max_time_to_first_token_s"),
    (SERVING + "&duration_hours=week", "duration_hours", "$.inference.duration_hours"),
    (PLAN + "&global_batch_size=64&global_batch_tokens=100000", "global_batch_tokens",
     "$.training.global_batch_tokens"),
    (PLAN + "&global_batch_size=0", "global_batch_size", "$.training.global_batch_size"),
]  # fmt: skip


def _refused(w: Watched) -> None:
    """The 422s the page asked for show in the console as failed loads: expected here."""
    w.errors = [e for e in w.errors if "status of 422" not in e]


def _field_error(page: Page, field: str, path: str) -> str:
    note = page.locator(f"#{field}-error")
    assert note.is_visible(), field
    assert path in note.inner_text(), note.inner_text()
    described = page.locator(f"#{field}").get_attribute("aria-describedby") or ""
    assert f"{field}-error" in described.split()
    assert page.locator(f"#{field}").get_attribute("aria-invalid") == "true"
    return note.inner_text()


@pytest.mark.parametrize(("link", "field", "path"), BAD)
def test_a_bad_value_is_shown_under_its_field(
    watched: Watched, link: str, field: str, path: str
) -> None:
    page = watched.page
    watched.open(link)
    _field_error(page, field, path)
    # Only that field (and, for two that conflict, its partner) is marked.
    marked = page.locator("[aria-invalid=true]").evaluate_all("ns => ns.map(n => n.id)")
    assert field in marked, marked
    assert len(marked) <= 2, marked
    _refused(watched)


def test_a_bad_workload_or_mig_value_is_shown_under_its_input(watched: Watched) -> None:
    page = watched.page
    watched.open(PLAN.replace("batch_size=2", "batch_size=0") + "&mw=bad:9g.99gb:1")
    _field_error(page, "batch_size", "$.workload.batch_size")
    # The third MIG row's profile: the plan names it by its index.
    page.get_by_role("tab", name="MIG").click()
    spec = page.locator("#mig-rows tr").nth(2).locator("input").nth(1)
    assert spec.get_attribute("aria-invalid") == "true"
    note = page.locator(f"#{spec.get_attribute('id')}-error")
    assert "$.workloads[2].profile" in note.inner_text()
    assert "9g.99gb" in note.inner_text()
    _refused(watched)


def test_a_bad_value_typed_in_the_form_is_shown_then_cleared(watched: Watched) -> None:
    page = watched.page
    watched.open(SERVING)
    # The browser takes 0 (the schema's bound is exclusive); the API refuses it.
    page.get_by_label("Longest time per output token (s)").fill("0")
    page.get_by_role("button", name="Plan", exact=True).click()
    page.wait_for_url("**max_time_per_output_token_s=0**")
    watched.ready()
    text = _field_error(
        page, "max_time_per_output_token_s", "$.inference.max_time_per_output_token_s"
    )
    assert "> 0" in text
    watched.shot("field-error")
    page.get_by_label("Longest time per output token (s)").fill("0.2")
    page.get_by_role("button", name="Plan", exact=True).click()
    page.wait_for_url("**max_time_per_output_token_s=0.2**")
    watched.ready()
    assert page.locator(".field-error").count() == 0
    assert page.locator("[aria-invalid]").count() == 0
    assert page.locator("#problem").is_hidden()
    _refused(watched)


@pytest.mark.torch
def test_a_pasted_config_draws_its_traced_step(watched: Watched, server: str) -> None:
    page = watched.page
    query = urlencode(
        {
            "view": "memory",
            "config": json.dumps(TINY_LLAMA),
            "mode": "training",
            "batch_size": 2,
            "sequence_length": 128,
            "gpu": "l4-24gb",
            "training_tokens": 1_000_000,
            "trace": 1,
            "t.batch_size": 2,
            "t.sequence_length": 128,
        }
    )
    page.goto(f"{server}/ui?{query}")
    page.wait_for_selector("body[data-ready=true]", timeout=120_000)
    assert json.loads(page.locator("#config").input_value()) == TINY_LLAMA
    assert page.locator("#trace").is_checked()
    traced = _post(
        server,
        "/v1/memory/trace",
        {"model": {"hf_config": TINY_LLAMA}, "workload": {"batch_size": 2, "sequence_length": 128}},
    )
    drawn = {
        label.get_attribute("data-phase"): int(label.get_attribute("data-bytes") or -1)
        for label in page.get_by_test_id("memory-chart").locator("#timeline .phase-bytes").all()
    }
    assert drawn == {k: v for k, v in traced["phases"].items() if v > 0}
    assert _gib(traced["peak_bytes"]) in page.locator("#timeline h3").inner_text()
    estimate = _post(
        server,
        "/v1/memory/estimate",
        {
            "model": {"hf_config": TINY_LLAMA},
            "workload": {"mode": "training", "batch_size": 2, "sequence_length": 128},
            "gpu": "l4-24gb",
        },
    )
    _check_memory(page, estimate)
    watched.shot("memory-traced")


def test_without_a_plan_the_page_shows_the_worked_example(watched: Watched) -> None:
    page = watched.page
    page.goto(watched.base + "/")  # redirects to /ui
    watched.ready()
    assert urlsplit(page.url).path == "/ui"
    assert page.locator("#model").input_value() == "llama-3.1-8b"
    assert page.get_by_test_id("memory-chart").locator("rect.part").count() > 3
    page.get_by_role("tab", name="MIG").click()
    assert page.get_by_test_id("mig-layout").locator("g.instance").count() >= 5
    assert "NVIDIA A100 SXM4 80GB" in (page.locator("#mig-summary").text_content() or "")


def test_the_api_reference_works_offline(watched: Watched) -> None:
    page = watched.page
    page.goto(watched.base + "/schema")
    page.wait_for_selector(".opblock", timeout=30_000)
    assert page.locator(".opblock").count() > 15
    watched.shot("reference")


def test_with_api_tokens_the_page_asks_for_one(browser: Browser) -> None:
    token = "planner-token-0123456789abcdef"
    with serving(settings={"GPUPLAN_API_TOKENS": token}) as base:
        w = Watched(browser, base)
        page = w.page
        page.goto(base + "/ui")
        page.get_by_label("API token").wait_for(timeout=30_000)
        assert "401" in " ".join(w.errors)  # the refused calls, shown in the console
        page.get_by_label("API token").fill(token)
        page.get_by_role("button", name="Use token").click()
        w.ready()
        assert page.locator("#problem").is_hidden()
        assert page.get_by_test_id("memory-chart").locator("rect.part").count() > 3
        assert token not in page.url  # kept in the tab, never in the link
        # The calls before the token was given were refused (401s in the console); the
        # drawn chart and the empty problem box show that the calls after it were not.
        w.errors = [e for e in w.errors if "status of 401" not in e]
        w.check_clean()
