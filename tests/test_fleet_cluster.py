"""The fleet schema on a real Redis Cluster (three masters of our own, on free ports).

The node's keys share a hash tag, so its MULTI block is single-slot; the global
index, streams and event go beside it. The reader's pipelines span slots.
"""

import asyncio
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator

import msgspec
import pytest
import redis
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot

from gpuplan.core.fleet import NodeSnapshot
from gpuplan.fleet.schema import Keys
from gpuplan.fleet.store import FleetStore
from gpuplan.fleet.writer import publish
from tests.agent_fixtures import snapshot
from tests.conftest import free_port

pytestmark = pytest.mark.slow


def _cluster_ok(port: int) -> bool:
    info = redis.Redis(port=port).cluster("INFO")
    if isinstance(info, dict):  # redis-py parses the reply
        return bool(info.get("cluster_state") == "ok")
    return b"cluster_state:ok" in info


@pytest.fixture
def cluster() -> Iterator[str]:
    server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    if server is None or cli is None:
        pytest.skip("redis-server and redis-cli are needed for a cluster")
    ports = [free_port() for _ in range(3)]
    with tempfile.TemporaryDirectory() as workdir:
        processes = [
            subprocess.Popen(
                [
                    server,
                    "--port",
                    str(port),
                    "--bind",
                    "127.0.0.1",
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    f"nodes-{port}.conf",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--dir",
                    workdir,
                    "--cluster-port",  # the default, port + 10000, may not exist
                    str(free_port()),
                ],
                stdout=subprocess.DEVNULL,
            )
            for port in ports
        ]
        try:
            for port in ports:
                deadline = time.monotonic() + 10
                while True:
                    try:
                        if redis.Redis(port=port, socket_connect_timeout=0.2).ping():
                            break
                    except redis.RedisError:
                        assert time.monotonic() < deadline, "redis-server did not start"
                        time.sleep(0.05)
            subprocess.run(
                [cli, "--cluster", "create", *(f"127.0.0.1:{p}" for p in ports),
                 "--cluster-replicas", "0", "--cluster-yes"],
                check=True, capture_output=True, timeout=30,
            )  # fmt: skip
            deadline = time.monotonic() + 10
            while not _cluster_ok(ports[0]):
                assert time.monotonic() < deadline, "cluster did not converge"
                time.sleep(0.1)
            yield f"redis://127.0.0.1:{ports[0]}/0"
        finally:
            for process in processes:
                process.terminate()
            for process in processes:
                process.wait(timeout=10)


def test_publish_and_read_on_a_cluster(cluster: str) -> None:
    keys = Keys()
    names = [f"node-{i}" for i in range(6)]
    node_slots = {key_slot(keys.node(n).encode()) for n in names}
    assert len(node_slots) > 1  # the nodes spread over the cluster...
    for name in names:  # ...while each node's keys stay on one slot
        snap = snapshot(name)
        node_keys = [keys.node(name), keys.bench(name)]
        node_keys += [keys.gpu(name, g.uuid) for g in snap.gpus]
        node_keys += [keys.mig(name, m.mig_uuid) for m in snap.mig_instances]
        assert len({key_slot(k.encode()) for k in node_keys}) == 1

    async def go() -> list[NodeSnapshot]:
        client = RedisCluster.from_url(cluster)
        try:
            written: dict[str, NodeSnapshot] = {}
            for name in names:
                written[name] = snapshot(name)
                await publish(client, keys, written[name], new_benchmark=True)
            read = await FleetStore(client, keys).nodes()
            assert [n.node for n in read] == names
            for node in read:
                assert msgspec.json.encode(node) == msgspec.json.encode(written[node.node])
            assert await client.xlen(keys.bench_stream) == len(names)
            return read
        finally:
            await client.aclose()

    assert len(asyncio.run(go())) == 6
