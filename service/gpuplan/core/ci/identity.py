"""``plan_id``: the hash of a plan's normalized input.

Normalized means decoded into the schema (defaults filled in, so omitting a default
and writing it out give the same id) and encoded as JSON with sorted keys (so the
order of a file's keys does not matter). A CI job can compare ids to tell whether a
change touched the plan's input at all.
"""

import hashlib

import msgspec

from gpuplan.core.ci.schema import CiPlan


def plan_id(request: CiPlan) -> str:
    canonical = msgspec.json.encode(request, order="sorted")
    return "sha256:" + hashlib.sha256(canonical).hexdigest()
