"""Which price a GPU's cloud cost uses: one stated basis, and what wins over it.

In order, the first that prices the GPU:

1. the request's own price (``constraints.prices``): provider ``request``;
2. a negotiated price in the catalog file (``[gpu.price.cloud_on_demand]``): provider
   ``catalog_file``;
3. the price tables of the basis: the lowest ``pricing.kind`` price among the
   ``pricing.providers`` tables that list the GPU (default: AWS on-demand), named by its
   provider.

A GPU none of them prices has no cloud cost; it is never given a price from a table
outside the basis, since mixing providers is what makes a comparison favour whichever
GPU happened to be priced at the cheaper one.
"""

from collections.abc import Iterable

from gpuplan.core.catalog import CloudQuote, GpuSpec, lowest
from gpuplan.core.recommend.job import Job
from gpuplan.core.recommend.schema import PriceBasis, PriceUsed

OVERRIDE = "request"
CATALOG_FILE = "catalog_file"
OWNED = "owned"


def cloud_price(gpu: GpuSpec, job: Job) -> PriceUsed | None:
    """The cloud price per GPU-hour of ``gpu`` on the request's basis, or None."""
    override = job.prices.get(gpu.id)
    if override is not None and override.cloud_usd_per_gpu_hour is not None:
        return PriceUsed(
            usd_per_gpu_hour=override.cloud_usd_per_gpu_hour,
            provider=OVERRIDE,
            source="constraints.prices of the request",
        )
    negotiated = gpu.price.cloud_on_demand
    if negotiated is not None:
        return PriceUsed(
            usd_per_gpu_hour=negotiated.usd_per_gpu_hour,
            provider=CATALOG_FILE,
            as_of=negotiated.as_of,
            source=negotiated.source,
        )
    quote = lowest(gpu, job.providers, job.price_kind)
    return _from_quote(quote) if quote is not None else None


def _from_quote(quote: CloudQuote) -> PriceUsed:
    where = quote.source.title + (f" ({quote.source.url})" if quote.source.url else "")
    instance = quote.instance
    if quote.usd_per_instance_hour is not None and quote.gpus > 1:
        instance += f": ${quote.usd_per_instance_hour:,.2f}/h for {quote.gpus} GPUs"
    return PriceUsed(
        usd_per_gpu_hour=quote.usd_per_gpu_hour,
        provider=quote.provider,
        kind=quote.kind,
        term=quote.term,
        instance=instance,
        as_of=quote.as_of,
        source=where,
    )


def describe(price: PriceUsed) -> str:
    """A reason line: the price, whose it is and when it was read."""
    head = f"cloud ${price.usd_per_gpu_hour:.2f}/GPU-h"
    if price.provider == OVERRIDE:
        return f"{head} from the request (constraints.prices)"
    if price.provider == CATALOG_FILE:
        return f"{head} negotiated in the catalog file, as of {price.as_of} ({price.source})"
    term = f" for {price.term}" if price.term else ""
    return f"{head}: {price.provider} {price.kind}{term} ({price.instance}), as of {price.as_of}"


def basis_words(job: Job) -> str:
    """The basis in a few words, e.g. "aws on_demand, the default basis"."""
    tables = ", ".join(job.providers)
    lowest_of = ", each GPU at the lowest of them" if len(job.providers) > 1 else ""
    default = ", the default basis" if job.default_basis else ""
    return f"{tables} {job.price_kind}{lowest_of}{default}"


def price_basis(job: Job, unpriced: Iterable[str], deployment: str) -> PriceBasis:
    """The response's statement of the basis, with the candidate GPUs left unpriced."""
    detail = (
        f"cloud prices per GPU-hour: {basis_words(job)}; constraints.prices and a catalog "
        "file's negotiated prices win over the tables"
    )
    if deployment == "on_prem":
        detail += "; deployment on_prem costs owned GPUs (purchase amortized, electricity) instead"
    elif deployment == "hybrid":
        detail += "; deployment hybrid takes per GPU the cheaper of this and owning"
    return PriceBasis(
        providers=list(job.providers),
        kind=job.price_kind,
        default=job.default_basis,
        detail=detail,
        unpriced=sorted(unpriced),
    )
