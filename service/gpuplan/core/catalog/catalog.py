"""The catalog and its lookups: every name a GPU goes by leads to one SKU.

Callers name GPUs the way their tools print them: a slug (``h100-sxm5-80gb``), a
marketing name ("H100 SXM"), the NVML/nvidia-smi product name ("NVIDIA H100 80GB
HBM3"), the Kubernetes label GPU Feature Discovery derives from it
(``NVIDIA-H100-80GB-HBM3``, with ``-MIG-1g.10gb`` or ``-SHARED`` appended on MIG or
shared nodes) or a PCI device id (``0x2330``, ``10de:2330``, mig-parted's
``0x233010DE``). Names are compared after folding case, dropping everything but
letters and digits, and dropping vendor words (NVIDIA, Tesla, GeForce, AMD,
Instinct, Intel, Habana), so the NVML name and its GFD label fold to the same key.
"""

import re
from collections.abc import Iterator, Sequence

from gpuplan.core.catalog.model import GpuSpec, PriceProvider
from gpuplan.core.errors import DataError, InvalidRequest, NotFound
from gpuplan.core.names import closest, did_you_mean

_VENDOR_WORDS = ("nvidia", "tesla", "geforce", "amd", "instinct", "intel", "habana")
# GFD appends the MIG profile or a sharing marker to the product label.
_LABEL_SUFFIX = re.compile(r"([- ]mig[- ].*|-shared)$", re.IGNORECASE)
_PCI_FORMS = (
    re.compile(r"^\[?(?:(?P<vendor>[0-9a-f]{4}):)(?P<device>[0-9a-f]{4})\]?$"),  # 10de:2330, lspci
    re.compile(r"^0x(?P<device>[0-9a-f]{4})(?P<vendor>[0-9a-f]{4})?$"),  # 0x2330, 0x233010de
)
_VENDOR_PCI = {"nvidia": "10de", "amd": "1002", "intel": "8086"}


def fold(name: str) -> str:
    """The lookup key of a name: lower-case letters and digits, vendor words dropped."""
    key = re.sub(r"[^a-z0-9]", "", _LABEL_SUFFIX.sub("", name.strip()).lower())
    changed = True
    while changed:
        changed = False
        for word in _VENDOR_WORDS:
            if key.startswith(word) and len(key) > len(word):
                key = key[len(word) :]
                changed = True
    return key


def parse_pci_id(text: str) -> tuple[str | None, str] | None:
    """``(vendor, device)`` as 4-digit hex if ``text`` is a PCI id form, else None."""
    lowered = text.strip().lower()
    for form in _PCI_FORMS:
        match = form.match(lowered)
        if match:
            return match["vendor"], match["device"]
    return None


class DuplicateName(DataError):
    """Two SKUs go by one name; ``ids`` are the two SKUs."""

    def __init__(self, message: str, ids: tuple[str, str]) -> None:
        super().__init__(message)
        self.ids = ids


class UnknownGpu(NotFound):
    """No SKU goes by that name; ``suggestions`` holds the closest ids."""

    @property
    def reason(self) -> str:
        """Why the name is refused, with the closest ids."""
        return f"no GPU in the catalog is named {self.query!r}{did_you_mean(self.suggestions)}"


class Catalog:
    """An ordered, indexed set of GPU SKUs. Built once; never mutated."""

    def __init__(self, gpus: Sequence[GpuSpec], providers: Sequence[PriceProvider] = ()) -> None:
        self._gpus = tuple(sorted(gpus, key=lambda g: g.id))
        self.providers: tuple[PriceProvider, ...] = tuple(providers)
        """The price tables the GPUs' ``price.cloud`` quotes come from."""
        self._by_key: dict[str, GpuSpec] = {}
        self._by_pci: dict[tuple[str, str], GpuSpec] = {}
        for gpu in self._gpus:
            for name in (gpu.id, gpu.name, *gpu.aliases, *gpu.nvml_names):
                self._add(fold(name), gpu, name)
            for device in gpu.pci_device_ids:
                pci = (_VENDOR_PCI[gpu.vendor], device[2:])
                other = self._by_pci.setdefault(pci, gpu)
                if other is not gpu:
                    raise DuplicateName(
                        f"PCI id {device} names both `{other.id}` and `{gpu.id}`",
                        (other.id, gpu.id),
                    )

    def _add(self, key: str, gpu: GpuSpec, name: str) -> None:
        if not key:
            raise DuplicateName(
                f"entry `{gpu.id}`: the name {name!r} folds to nothing", (gpu.id, gpu.id)
            )
        other = self._by_key.setdefault(key, gpu)
        if other is not gpu:
            raise DuplicateName(
                f"the name {name!r} names both `{other.id}` and `{gpu.id}`", (other.id, gpu.id)
            )

    def __iter__(self) -> Iterator[GpuSpec]:
        return iter(self._gpus)

    def __len__(self) -> int:
        return len(self._gpus)

    @property
    def gpus(self) -> tuple[GpuSpec, ...]:
        return self._gpus

    def get(self, query: str) -> GpuSpec:
        """The SKU ``query`` names, in any lookup form; raises :class:`UnknownGpu`."""
        pci = parse_pci_id(query)
        if pci is not None:
            vendor, device = pci
            for (gpu_vendor, gpu_device), gpu in self._by_pci.items():
                if gpu_device == device and vendor in (None, gpu_vendor):
                    return gpu
        found = self._by_key.get(fold(query))
        if found is None:
            raise UnknownGpu(query, self.suggest(query))
        return found

    def lookup(self, query: str, path: str) -> GpuSpec:
        """The SKU a request names at ``path``; an unknown name is a bad value there
        (:class:`~gpuplan.core.errors.InvalidRequest`, 422), not a missing resource."""
        try:
            return self.get(query)
        except UnknownGpu as exc:
            raise InvalidRequest([(path, exc.reason)], suggestions=exc.suggestions) from None

    def suggest(self, query: str) -> list[str]:
        """Ids of the SKUs whose names are closest to ``query`` (:mod:`gpuplan.core.names`:
        every name a SKU goes by counts, folded as lookups fold them)."""
        names = (
            (name, gpu.id)
            for gpu in self._gpus
            for name in (gpu.id, gpu.name, *gpu.aliases, *gpu.nvml_names)
        )
        return closest(query, names, fold=fold)
