"""How the live-fleet answers say sizes and an absent node: one wording for
``GET /v1/mig/slices`` and the fleet placements, so the two never read differently."""

GiB = 2**30


def gib(value: float) -> str:
    """Bytes as GiB with two decimals, the unit named."""
    return f"{value / GiB:.2f} GiB"


def not_live(node: str | None) -> str:
    """The note of an answer that found no live node (``node``: the one asked for)."""
    if node is None:
        return "no live node in the fleet: no agent has published within its TTL"
    return (
        f"node {node!r} is not live: it never published, or its agent stopped and its keys expired"
    )
