"""Usable memory of a MIG profile no capture gives, from a model fitted to all captures.

A GPU instance of ``k`` of a GPU's ``n`` memory slices gets its share ``k/n`` of the memory
the driver reports for the whole GPU (``T``, ``nvidia-smi --query-gpu=memory.total``, the
catalog's ``usable_memory_bytes``) less what MIG mode and the instance itself reserve. The
captures (``nvidia-smi mig -lgip`` and NVML, cited in ``data/sources.toml``) show that the
reserve is not a flat share: half- and full-GPU instances keep 97-99.7% of their share,
smaller ones 91-99%, and the share varies between GPUs (H100 80GB keeps the most, the
6-stack HBM parts the least). So the model is, for an instance holding ``f = k/n``::

    usable = floor_granule(r(f) * f * T)

with ``r(f)`` the lowest share any captured GPU keeps at that fraction, and the granule the
driver's allocation step: 128 MiB (every captured figure is a multiple of it, except the
A30's, which step by 64 MiB; flooring to the coarser step keeps a figure on both). Taking
the lowest share, not a mean, makes the model a lower envelope of the captures: it
reproduces the GPU that reserves the most exactly and under-promises the others, so a plan
built on a derived figure does not over-commit a GPU.
How far off it is for a GPU it has not seen is measured by leaving each captured table out
of the fit in turn (:func:`leave_one_out`; docs/mig.md gives the figures).

Two rules come before the model, both holding on every capture: profiles that occupy the
same memory slices hold the same memory (``1g.20gb`` = ``2g.20gb``, ``3g`` = ``4g``, ``+me``,
``-me`` and ``+gfx`` variants = the plain profile), so a table's captured figure carries to
its siblings; and where captures disagree (drivers differ by one granule), the data keeps the
lower one.
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from gpuplan.core.mig.model import MigGpu, MigProfile

GRANULE = 128 * 2**20
"""The step of the captured usable-memory figures: 128 MiB (64 MiB on the A30)."""

_WEAK = ("derived", "recalled")


@dataclass(frozen=True)
class Capture:
    """One captured profile: its table, its fraction of the GPU's memory slices, the GPU's
    total memory and the usable memory the capture shows."""

    table: str
    profile: str
    fraction: Fraction
    total_bytes: int
    usable_bytes: int

    @property
    def share(self) -> Fraction:
        """The part of its proportional share the instance keeps."""
        return Fraction(self.usable_bytes) / (self.fraction * self.total_bytes)


def is_captured(profile: MigProfile) -> bool:
    """Whether the profile's usable memory is read from a capture, not derived."""
    cited = profile.sources.get("memory_bytes", [])
    return (
        bool(cited)
        and "memory_bytes" not in profile.unverified
        and not any(s.kind in _WEAK for s in cited)
    )


def fraction_of(table: MigGpu, profile: MigProfile) -> Fraction:
    return Fraction(profile.memory_slices, table.memory_slices)


def captures(tables: Iterable[MigGpu], totals: Mapping[str, int]) -> list[Capture]:
    """Every captured profile of ``tables``; ``totals`` maps a table id to its ``T``."""
    return [
        Capture(t.id, p.name, fraction_of(t, p), totals[t.id], p.memory_bytes)
        for t in tables
        for p in t.profiles
        if is_captured(p)
    ]


def fit(points: Iterable[Capture]) -> dict[Fraction, Fraction]:
    """The lowest share kept at each fraction."""
    shares: dict[Fraction, Fraction] = {}
    for c in points:
        shares[c.fraction] = min(shares.get(c.fraction, c.share), c.share)
    return shares


def predict(fraction: Fraction, total_bytes: int, shares: Mapping[Fraction, Fraction]) -> int:
    """Usable bytes of an instance holding ``fraction`` of a GPU whose total is ``total_bytes``."""
    if fraction not in shares:
        raise ValueError(f"no capture holds {fraction} of a GPU's memory: the model has no share")
    exact = shares[fraction] * fraction * total_bytes
    return int(exact // GRANULE) * GRANULE


def derive(table: MigGpu, total_bytes: int, shares: Mapping[Fraction, Fraction]) -> dict[str, int]:
    """The usable bytes of each profile of ``table`` that no capture gives: a captured
    profile on the same memory slices if the table has one, else the model."""
    captured = {p.memory_slices: p.memory_bytes for p in table.profiles if is_captured(p)}
    return {
        p.name: captured.get(p.memory_slices) or predict(fraction_of(table, p), total_bytes, shares)
        for p in table.profiles
        if not is_captured(p)
    }


@dataclass(frozen=True)
class Held:
    """A captured profile predicted by the model fitted without its table."""

    capture: Capture
    predicted_bytes: int

    @property
    def error_bytes(self) -> int:
        """Predicted less captured: negative under-promises, positive over-promises."""
        return self.predicted_bytes - self.capture.usable_bytes

    @property
    def error(self) -> float:
        return self.error_bytes / self.capture.usable_bytes


def leave_one_out(points: Sequence[Capture]) -> list[Held]:
    """Each captured table left out of the fit in turn, its profiles predicted."""
    out: list[Held] = []
    for table in dict.fromkeys(c.table for c in points):
        shares = fit(c for c in points if c.table != table)
        out.extend(
            Held(c, predict(c.fraction, c.total_bytes, shares)) for c in points if c.table == table
        )
    return out
