"""What the agent knows right now: the newest snapshot and its own counters.

The collection loop writes it, the exporter and the publisher read it; all run on
one asyncio loop, so there is no locking.
"""

from collections import Counter
from dataclasses import dataclass, field

from gpuplan.core.fleet import NodeSnapshot


@dataclass
class AgentState:
    node: str
    snapshot: NodeSnapshot | None = None
    last_collect_ts: float | None = None
    collect_duration_seconds: float | None = None
    collects: int = 0
    collect_failures: int = 0
    collector_errors: Counter[str] = field(default_factory=Counter)
    backend: str = "none"
    redis_configured: bool = False
    redis_connected: bool = False
    redis_publishes: int = 0
    redis_publish_failures: int = 0
    benchmark_runs: Counter[str] = field(default_factory=Counter)
    last_benchmark_success_ts: float | None = None
