"""POST /v1/plan end to end: the core's answer, byte for byte; problems naming the field;
the live fleet's measured FLOP/s from a real Redis."""

from typing import Any

import msgspec
from litestar import Litestar
from litestar.testing import TestClient

from gpuplan.api.app import create_app
from gpuplan.config.settings import Settings
from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.ci import CiPlan, CiReport, check
from tests.agent_fixtures import snapshot
from tests.conftest import free_port
from tests.helpers import EVERY_TARGET, LLAMA_TRAINING, problem_at, publish_snapshots

PATH = "/v1/plan"
BODY: dict[str, Any] = {**LLAMA_TRAINING, "targets": EVERY_TARGET}


def test_plan_answers_the_cores_report_byte_for_byte(client: TestClient[Litestar]) -> None:
    first = client.post(PATH, json=BODY)
    assert first.status_code == 200, first.text
    expected = msgspec.json.encode(check(msgspec.convert(BODY, CiPlan), builtin_catalog()))
    assert first.content == expected
    assert client.post(PATH, json=BODY).content == first.content
    report = msgspec.json.decode(first.content, type=CiReport)
    assert [v.target for v in report.verdicts] == [
        "fits",
        "max_cost_usd",
        "max_time_hours",
        "mig_profile_at_most",
        "min_memory_headroom",
    ]
    fits = report.verdicts[0]
    assert fits.status == "pass"
    assert fits.gpu == "a100-sxm4-80gb"
    assert fits.count == 4
    # 7B full training does not fit a whole A100 80GB, let alone a MIG instance of it.
    assert report.verdicts[3].status == "fail"
    assert not report.passed


def test_bad_input_is_problem_json_naming_the_field(client: TestClient[Litestar]) -> None:
    def with_targets(**targets: Any) -> dict[str, Any]:
        return {**BODY, "targets": targets}

    problem_at(
        client.post(PATH, json=with_targets(fits={"gpu": "NVIDIA L5"})), "$.targets.fits.gpu"
    )
    problem_at(client.post(PATH, json=with_targets(fit={"gpu": "NVIDIA L4"})), "$.targets.fit")
    problem_at(
        client.post(PATH, json=with_targets(min_memory_headroom=1.5)),
        "$.targets.min_memory_headroom",
    )
    problem_at(
        client.post(PATH, json=with_targets(fits={"gpu": "NVIDIA L4", "count": 0})),
        "$.targets.fits.count",
    )
    problem_at(client.post(PATH, json=with_targets()), "$.targets")
    problem_at(
        client.post(
            PATH, json=with_targets(mig_profile_at_most={"gpu": "NVIDIA L4", "profile": "1g.10gb"})
        ),
        "$.targets.mig_profile_at_most.gpu",
    )
    problem_at(
        client.post(
            PATH,
            json=with_targets(mig_profile_at_most={"gpu": "a100-sxm4-80gb", "profile": "9g.90gb"}),
        ),
        "$.targets.mig_profile_at_most.profile",
    )
    no_targets = {k: v for k, v in BODY.items() if k != "targets"}
    problem_at(client.post(PATH, json=no_targets), "$.targets")
    no_volume = {k: v for k, v in BODY.items() if k != "training"}
    problem_at(client.post(PATH, json=no_volume), "$.training")
    problem_at(client.post(PATH, json={**BODY, "model": {"name": "llama-99b"}}), "$.model.name")


def test_the_live_fleets_measurements_time_the_plan(redis_url: str, key_prefix: str) -> None:
    """The fleet's measured bf16 matmul (the agent's 8192-cubed GEMM, timed alone) is the
    rate the plan's GEMMs run at, at the share of it a training step realizes
    (``kernels.measured_kernel_share``, as for a measured kernel table): a node that
    measures half the rate plans much slower. 760 TFLOP/s is what a healthy H200
    measures (the H200 kernel table's 8192-cubed GEMM: 806), so a healthy fleet plans
    near the catalog's plan, not 989.5 / 760 slower as a datasheet-relative
    roofline would say."""
    body = {
        **BODY,
        "targets": {"fits": {"gpu": "h200-sxm-141gb", "count": 2}, "max_time_hours": 1e4},
    }
    slow_prefix = f"{key_prefix}slow:"
    publish_snapshots(redis_url, key_prefix, snapshot("node-a"), snapshot("node-b"))
    publish_snapshots(
        redis_url,
        slow_prefix,
        snapshot("node-a", bf16_flops=380e12),
        snapshot("node-b", bf16_flops=380e12),
    )

    def fleet(prefix: str) -> Settings:
        return Settings(redis_url=redis_url, fleet_key_prefix=prefix, redis_timeout_seconds=0.3)

    with (
        TestClient(app=create_app(fleet(key_prefix))) as healthy_fleet,
        TestClient(app=create_app(fleet(slow_prefix))) as slow_fleet,
        TestClient(app=create_app(Settings())) as bare,
    ):
        measured = healthy_fleet.post(PATH, json=body).json()
        slow = slow_fleet.post(PATH, json=body).json()
        datasheet = bare.post(PATH, json=body).json()
    t_measured = measured["verdicts"][1]["actual"]
    t_slow = slow["verdicts"][1]["actual"]
    t_datasheet = datasheet["verdicts"][1]["actual"]
    assert t_slow > 1.5 * t_measured
    assert 0.8 < t_measured / t_datasheet < 1.25
    assert measured["plan_id"] != datasheet["plan_id"]
    h200 = [r for r in measured["recommendations"] if r["gpu"] == "h200-sxm-141gb"]
    assert h200
    assert h200[0]["source"] == "measured"


def test_a_redis_outage_plans_with_the_catalog_and_says_so() -> None:
    dead = f"redis://127.0.0.1:{free_port()}/0"
    settings = Settings(redis_url=dead, redis_timeout_seconds=0.2)
    with TestClient(app=create_app(settings)) as client:
        response = client.post(PATH, json=BODY)
    assert response.status_code == 200
    assert any("does not answer" in w for w in response.json()["warnings"])
