"""GET and POST /v1/fleet/placements, and ``gpuplan fleet place``, end to end: nodes
published by the agent's writer to a real Redis, read back by the API and the CLI; 404
without Redis, 503 while it is down; 422 naming each bad field."""

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
import redis
from click.testing import CliRunner
from litestar import Litestar
from litestar.testing import TestClient

from gpuplan.cli import main
from gpuplan.core.fleet import NodeList
from tests.agent_fixtures import snapshot
from tests.conftest import RedisServer, free_port
from tests.helpers import (
    fleet_client,
    fleet_not_configured,
    problem,
    publish_snapshots,
    redis_outage,
)
from tests.placement_fleet import fleet_node

GiB = 2**30

# H100 80GB GPUs, each offering one tier for a 19 GiB workload (see test_fleet_placement).
FREE = [("1g.10gb", 0, True), ("3g.40gb", 4, False)]
SLICES = [("1g.10gb", 0, True), ("3g.40gb", 4, True)]
IDLE = [("1g.10gb", 0, True), *[("1g.10gb", s, False) for s in (1, 2, 3)], ("3g.40gb", 4, True)]
BUSY = [("1g.10gb", 0, True), ("1g.10gb", 1, True), ("2g.20gb", 2, True), ("3g.40gb", 4, True)]


def _ask(client: TestClient[Litestar], method: str, **query: Any) -> Any:
    """The placement answer, asked by GET (a query string) or POST (a JSON body)."""
    if method == "GET":
        params = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in query.items()}
        response = client.get("/v1/fleet/placements", params=params)
    else:
        response = client.post("/v1/fleet/placements", json=query)
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_each_tier_first_on_a_published_fleet(redis_url: str, key_prefix: str, method: str) -> None:
    # Node by node, the fleet gains a GPU that offers a less disruptive option.
    layouts: list[Any] = [BUSY, IDLE, SLICES, FREE]
    expected = [
        ("drain", "n0", "1g.20gb", 1),
        ("repartition-idle", "n1", "1g.20gb", 0),
        ("create", "n2", "1g.20gb", 0),
        ("none", "n3", "3g.40gb", 0),
    ]
    with fleet_client(redis_url, key_prefix) as client:
        for n, layout in enumerate(layouts):
            publish_snapshots(
                redis_url, key_prefix, fleet_node(f"n{n}", [layout]), new_benchmark=False
            )
            body = _ask(client, method, memory_gib=19)
            first = body["options"][0]
            disruption, node, profile, drained = expected[n]
            assert (body["disruption"], first["node"], first["profile"]) == (
                disruption,
                node,
                profile,
            )
            assert first["drained"] == drained
            assert (body["nodes"], body["gpus"], body["matched"]) == (n + 1, n + 1, max(n, 1))
        assert [o["disruption"] for o in body["options"]] == ["none", "create", "repartition-idle"]
        created = body["options"][1]
        assert created["steps"][0] == (
            "on node n2: nvidia-smi mig -i 0 -cgi 1g.20gb:2 -C (a 1g.20gb GPU instance with its "
            "compute instance; lands at 2)"
        )
        assert created["resource"] == "nvidia.com/mig-1g.20gb"
        assert created["memory_bytes"] == int(19.625 * GiB)
        assert [(i["profile"], i["in_use"], i["new"]) for i in created["layout_after"]] == [
            ("1g.10gb", True, False),
            ("1g.20gb", False, True),
            ("3g.40gb", True, False),
        ]
        # The drain tier stays out while anything else can take it.
        body = _ask(client, method, memory_gib=19, node="n0")
        assert body["disruption"] == "drain"
        assert body["options"][0]["destroy"][0]["mig_uuids"] == ["MIG-n0-0-2"]


def test_the_recorded_nodes(redis_url: str, key_prefix: str) -> None:
    """The agents' own snapshots of an HGX H200 node and an A100 node, as published."""
    publish_snapshots(
        redis_url,
        key_prefix,
        snapshot("node-a"),
        snapshot("node-b", fixture="a100-pcie-mig"),
        new_benchmark=False,
    )
    with fleet_client(redis_url, key_prefix) as client:
        body = _ask(client, "GET", memory_gib=10)
        assert [(o["node"], o["profile"]) for o in body["options"][:3]] == [
            ("node-a", "1g.18gb"),
            ("node-b", "3g.20gb"),
            ("node-a", "2g.35gb"),
        ]
        body = _ask(client, "GET", memory_gib=40, compute_slices=3)
        first, second = body["options"]
        # GPU 1 runs a 3g.71gb; its idle 2g.35gb and 1g.18gb make room for another.
        assert (first["action"], first["gpu_index"], first["placement_start"]) == (
            "repartition",
            1,
            4,
        )
        assert [d["profile"] for d in first["destroy"]] == ["2g.35gb", "1g.18gb"]
        # GPU 0 is free and not in MIG mode: MIG enabled there ranks after.
        assert (second["action"], second["gpu_index"]) == ("enable-mig", 0)
        assert "1 GPU(s) the driver reports lost are left out" in body["notes"]
        assert any(n.startswith("no profile of MIG table `a100-40gb`") for n in body["notes"])
        body = _ask(client, "POST", memory_gib=100, whole_gpu=True)
        (whole,) = body["options"]
        assert (whole["action"], whole["resource"], whole["profile"]) == (
            "use-gpu",
            "nvidia.com/gpu",
            None,
        )


def test_an_empty_fleet_answers_with_the_reason(redis_url: str, key_prefix: str) -> None:
    with fleet_client(redis_url, key_prefix) as client:
        body = _ask(client, "POST", memory_gib=8)
    assert (body["options"], body["disruption"]) == ([], None)
    assert body["reason"] == (
        "nothing in the live fleet can take the workload, even by draining: no live node "
        "in the fleet: no agent has published within its TTL"
    )


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_without_redis_it_is_not_configured_404(method: str) -> None:
    with fleet_client(None) as client:
        response = (
            client.get("/v1/fleet/placements?memory_gib=10")
            if method == "GET"
            else client.post("/v1/fleet/placements", json={"memory_gib": 10})
        )
    fleet_not_configured(response)


def test_redis_down_is_503_and_recovers(own_redis: RedisServer) -> None:
    publish_snapshots(own_redis.url, "gpuplan:v1:", snapshot("node-a"), new_benchmark=False)
    with fleet_client(own_redis.url) as client:
        assert client.get("/v1/fleet/placements?memory_gib=10").json()["matched"] == 3
        redis_outage(own_redis, client, "/v1/fleet/placements?memory_gib=10")
        assert client.get("/v1/fleet/placements?memory_gib=10").json()["options"] == []
        own_redis.stop()
        response = client.post("/v1/fleet/placements", json={"memory_gib": 10})
        assert problem(response, 503)["type"] == "urn:gpuplan:problem:fleet-unavailable"


def test_unreachable_redis_is_503() -> None:
    with fleet_client(f"redis://127.0.0.1:{free_port()}/0") as client:
        assert client.get("/v1/fleet/placements?memory_gib=1").status_code == 503


BAD: list[tuple[dict[str, Any], str]] = [
    ({}, "$.memory_gib"),
    ({"memory_gib": 0}, "$.memory_gib"),
    ({"memory_gib": 5000}, "$.memory_gib"),
    ({"memory_gib": "lots"}, "$.memory_gib"),
    ({"memory_gib": 4, "compute_slices": 0}, "$.compute_slices"),
    ({"memory_gib": 4, "compute_slices": 9}, "$.compute_slices"),
    ({"memory_gib": 4, "limit": 0}, "$.limit"),
    ({"memory_gib": 4, "limit": 1001}, "$.limit"),
    ({"memory_gib": 4, "node": "bad{name}"}, "$.node"),
    ({"memory_gib": 4, "gpu": ""}, "$.gpu"),
    ({"memory_gib": 4, "gpu": "h2000"}, "$.gpu"),
    ({"memory_gib": 4, "gpu": "l40s"}, "$.gpu"),
    ({"memory_gib": 4, "whole_gpu": "maybe"}, "$.whole_gpu"),
    ({"memory_gib": 4, "profile": "1g.10gb"}, "$.profile"),
    ({"profile": "1g.10g"}, "$.profile"),
    ({"profile": "3g.40gb", "gpu": "a100-sxm4-40gb"}, "$.profile"),
    ({"profile": "1g.10gb", "compute_slices": 1}, "$.compute_slices"),
    ({"profile": "1g.10gb", "whole_gpu": True}, "$.whole_gpu"),
    ({"memory_gib": 4, "colour": "blue"}, "$.colour"),
]


@pytest.mark.parametrize(("query", "path"), BAD)
@pytest.mark.parametrize("method", ["GET", "POST"])
def test_bad_values_are_422_naming_them(method: str, query: dict[str, Any], path: str) -> None:
    # No Redis: a bad query is refused before the fleet is read.
    with fleet_client(None) as client:
        if method == "GET":
            params = {
                k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in query.items()
            }
            response = client.get("/v1/fleet/placements", params=params)
        else:
            response = client.post("/v1/fleet/placements", json=query)
    errors = problem(response, 422)["errors"]
    assert errors[0]["path"] == path
    assert errors[0]["location"] == ("query" if method == "GET" else "body")


# -- gpuplan fleet place --------------------------------------------------------------


def test_cli_reads_the_published_fleet(redis_url: str, key_prefix: str) -> None:
    publish_snapshots(
        redis_url,
        key_prefix,
        fleet_node("n0", [BUSY]),
        fleet_node("n1", [IDLE]),
        new_benchmark=False,
    )
    env = {"GPUPLAN_REDIS_URL": redis_url, "GPUPLAN_FLEET_KEY_PREFIX": key_prefix}
    runner = CliRunner()
    result = runner.invoke(main, ["fleet", "place", "--memory-gib", "19"], env=env)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "workload: 19.00 GiB, 1 compute slice(s); 2 live node(s), 2 GPU(s)"
    assert lines[1].startswith("repartition-idle: no free instance fits and no GPU has free")
    assert lines[3].split() == [
        "1",
        "repartition-idle",
        "n1",
        "0",
        "1g.20gb",
        "2",
        "destroy",
        "2",
        "idle",
        "19.62",
        "GiB",
        "nvidia.com/mig-1g.20gb",
    ]
    assert "first option, step by step:" in lines
    result = runner.invoke(
        main, ["fleet", "place", "--memory-gib", "19", "--node", "n0", "--output", "json"], env=env
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["options"][0]["action"] == "drain"
    # Nothing can take 100 GiB on an H100 80GB: exit 1, with the reason.
    result = runner.invoke(main, ["fleet", "place", "--memory-gib", "100"], env=env)
    assert result.exit_code == 1
    assert "no profile of MIG table `h100-80gb`" in result.output


def test_cli_reads_a_saved_fleet_and_the_api_agrees(
    tmp_path: Path, redis_url: str, key_prefix: str
) -> None:
    nodes = [fleet_node("n0", [SLICES, "free"]), snapshot("node-a")]
    publish_snapshots(redis_url, key_prefix, *nodes, new_benchmark=False)
    with fleet_client(redis_url, key_prefix) as client:
        saved = client.get("/v1/fleet/nodes").json()
        api = _ask(client, "POST", memory_gib=30, compute_slices=2)
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps(saved))
    request = tmp_path / "workload.yaml"
    request.write_text("memory_gib: 30\ncompute_slices: 2\n")
    result = CliRunner().invoke(
        main, ["fleet", "place", "-f", str(request), "--nodes", str(path), "--output", "json"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == api
    assert msgspec.json.decode(path.read_bytes(), type=NodeList).count == 2


def test_cli_refusals() -> None:
    runner = CliRunner()
    result = runner.invoke(
        main, ["fleet", "place", "--memory-gib", "4"], env={"GPUPLAN_REDIS_URL": ""}
    )
    assert result.exit_code == 2
    assert "--redis-url" in result.output
    url = f"redis://127.0.0.1:{free_port()}/0"
    result = runner.invoke(main, ["fleet", "place", "--memory-gib", "4", "--redis-url", url])
    assert result.exit_code == 3
    assert "the fleet's Redis does not answer" in result.output
    assert url not in result.output  # a URL may hold a password
    result = runner.invoke(
        main, ["fleet", "place", "--memory-gib", "0", "--compute-slices", "2", "--redis-url", url]
    )
    assert result.exit_code == 2
    assert "$.memory_gib" in result.output
    result = runner.invoke(
        main,
        ["fleet", "place", "--profile", "3g.40gb", "--compute-slices", "2", "--redis-url", url],
    )
    assert result.exit_code == 2
    assert "$.compute_slices: only with `memory_gib`" in result.output


def test_cli_reads_a_redis_with_a_password(own_redis: RedisServer, tmp_path: Path) -> None:
    publish_snapshots(own_redis.url, "gpuplan:v1:", fleet_node("n0", [FREE]), new_benchmark=False)
    redis.Redis.from_url(own_redis.url).config_set("requirepass", "fleet-pass-0123456789")
    args = ["fleet", "place", "--memory-gib", "19", "--redis-url", own_redis.url]
    runner = CliRunner()
    assert runner.invoke(main, args).exit_code == 3
    secret = tmp_path / "redis-password"
    secret.write_text("fleet-pass-0123456789\n")
    result = runner.invoke(
        main, [*args, "--output", "json"], env={"GPUPLAN_REDIS_PASSWORD_FILE": str(secret)}
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["options"][0]["action"] == "use-instance"
