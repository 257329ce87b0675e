"""Latency percentiles of one replica under Poisson arrivals: the engine's queue and its
scheduler, in closed form.

The engine (vLLM, SGLang, TensorRT-LLM) keeps at most ``cap`` sequences in flight and
runs steps of at most ``budget`` tokens: a token for each decoding sequence, and chunks
of waiting prompts beside them (chunked prefill). A request that arrives when ``cap``
sequences are in flight waits for one to finish. Requests arrive at ``rate`` per second,
as a Poisson process.

The model, per replica, reads two kinds of step from the speed model's step function
(:func:`gpuplan.core.perf.serve.step_seconds`), tabulated over the occupancy
(:class:`StepTable`): a decode-only step, and one that also carries a chunk of prompt.

- **Mean step.** Prompt tokens arrive at ``rate x s`` per second; a share of the steps
  carries a chunk, so a prompt token adds ``(chunk step - decode step) / chunk`` to the
  time: ``tau(n) = decode(n) / (1 - rate x s x per_token(n))``.
- **Occupancy.** A request holds a slot for its prompt's chunks and ``o - 1`` decode
  steps. Below the cap the engine shares its steps among all sequences in flight (a
  symmetric queue, whose occupancy does not depend on the service time's distribution):
  the others an arrival finds are Poisson with mean ``m = rate x T(m + 1)``
  (M/G/infinity, ``T`` the slot time at that occupancy).
- **Admission queue.** With the cap as ``c`` servers of the saturated slot time, an
  arrival waits with Erlang C's probability (M/M/c); a wait is exponential with the mean
  of M/M/c's times ``(1 + cs^2) / 2``, the Allen-Cunneen correction for a service time
  that is nearly deterministic (``cs^2 = 0``: every request of a plan has the same prompt
  and output length).
- **Prefill queue.** Prompts go through chunk steps one after another: an M/D/1 queue of
  utilization ``rate x prefill``, whose wait (Pollaczek-Khinchine mean, exponential tail)
  comes before the prompt's own chunks.
- **TTFT** = one wait at the percentile's tail plus the other's mean, whichever pairing
  is larger (continuous where the two tails cross), the rest of the decode step in
  progress, and the prompt's own chunk steps at the occupancy's percentile.
- **TPOT** = the mean step over a request's decode steps, at the percentile of the
  occupancy averaged over its life (for M/G/infinity with a fixed service time, that
  average has 2/3 of the instantaneous variance), plus the spread of the prompts that
  arrive during its life (Poisson), each adding its chunk steps.

Quantiles of occupancy come from a normal approximation of the Poisson (the latencies
grow monotonically with occupancy, so a latency's quantile is the latency at the
occupancy's quantile). ``bench/serving/queue_sim.py`` checks every percentile against a
discrete-event simulation of the same scheduler and step function (docs/serving.md).
"""

import itertools
import math
from collections.abc import Callable
from statistics import NormalDist
from typing import NamedTuple

StepFn = Callable[[float, float], float]
"""Seconds of one engine step with ``n`` decoding sequences and ``p`` prompt tokens."""

QUANTILES = (0.5, 0.95, 0.99)
"""The percentiles reported: p50, p95, p99."""

SERVICE_SCV = 0.0
"""Squared coefficient of variation of a request's slot time and of a prompt's prefill:
0, every request of a plan has the same prompt and output length (the queues' correction
factor is (1 + cs^2) / 2)."""

OCCUPANCY_TOLERANCE = 1e-6
"""The mean occupancy is solved to a gap of this share of itself (of one sequence below
one sequence)."""

LIFETIME_VARIANCE = 2.0 / 3.0
"""Variance of M/G/infinity's occupancy averaged over one fixed service time, over its
instantaneous variance: (2 / T^2) x integral over 0..T of (T - h)(1 - h / T) dh."""

_NORMAL = NormalDist()
_SQRT2 = math.sqrt(2.0)
_Z = {q: _NORMAL.inv_cdf(q) for q in QUANTILES}


def _z(level: float) -> float:
    """The standard normal's ``level`` quantile: a reported percentile's from the table
    (a replica that never waits for a slot reads its TTFT at the quantile itself, about
    a third of a serving search's asks), else ``NormalDist``'s."""
    z = _Z.get(level)
    return z if z is not None else _NORMAL.inv_cdf(level)


class Percentiles(NamedTuple):
    p50: float
    p95: float
    p99: float


class LoadPoint(NamedTuple):
    """One replica at an arrival rate: its load and its latency percentiles (infinite
    when the rate is past what the replica can serve)."""

    rate_per_s: float
    saturation_rate_per_s: float
    """Arrivals per second at which the queue grows without bound."""

    mean_in_flight: float
    """Sequences in flight an arriving request finds, on average (itself excluded)."""

    wait_probability: float
    """Chance an arrival finds ``cap`` sequences in flight and queues."""

    ttft_s: Percentiles
    tpot_s: Percentiles


class Scheduler(NamedTuple):
    """What the queue depends on besides the step function."""

    cap: int
    """Sequences in flight at most (``--max-num-seqs``, or what the KV cache holds)."""

    budget: int
    """Tokens one step takes at most (``--max-num-batched-tokens``)."""

    prompt_tokens: int
    output_tokens: int


class StepTable:
    """The two kinds of step the scheduler runs, at 0, a quarter, half and all of the cap
    decodes, linear in between: a decode-only step, and a step that also carries a chunk
    of prompt (as much of one prompt as the budget leaves). A search then asks for many
    loads at the cost of at most eight steps, each timed when first read."""

    def __init__(self, step: StepFn, sched: Scheduler) -> None:
        self.sched = sched
        self.ns = sorted({0, sched.cap // 4, sched.cap // 2, sched.cap})
        self._last, self._top = len(self.ns) - 1, float(self.ns[-1])
        self._step = step
        # Each step is timed when first read: the saturation rate alone reads two.
        self._decode_s: list[float | None] = [None] * len(self.ns)
        self._chunk_s: list[float | None] = [None] * len(self.ns)
        self._points: dict[float, tuple[float, float, float, int]] = {}
        # What a search asks at one rate more than once (an SLO search's ``keeps``, then
        # ``under_load`` at the rate it settled on): pure functions of the rate.
        self._states: dict[float, _State | LoadPoint] = {}
        self._quantiles: dict[tuple[float, float, bool], tuple[float, float]] = {}
        # Per pair of p95 targets, the highest rate known to keep them and the lowest
        # known to miss them, each with its p95 over its target (:func:`keeps`;
        # :func:`max_rate` starts its secant from them).
        self._verdicts: dict[tuple[float | None, float | None], list[float]] = {}
        self._saturation: float | None = None

    def point(self, n: float) -> tuple[float, float, float, int]:
        """At ``n`` decodes, in one look-up: the decode step, the chunk step, what a
        prompt token adds, and the steps of one prompt (memoized: a search asks again)."""
        hit = self._points.get(n)
        if hit is None:
            hit = self._points[n] = self.unstored_point(n)
        return hit

    def unstored_point(self, n: float) -> tuple[float, float, float, int]:
        """:meth:`point` at ``n`` without the memo, for an ``n`` no one asks again (the
        occupancy's secant iterates: a fresh float at every step of every rate)."""
        decode, chunk = self._both(n)
        sched = self.sched
        # chunk_tokens(n), inline: a search reads thousands of points (min and max as
        # conditionals that pick as the builtins do).
        room = sched.budget - math.floor(n)
        room = 1 if room < 1 else room
        prompt = sched.prompt_tokens
        tokens = float(room if room < prompt else prompt)
        more = chunk - decode
        per_token = (0.0 if more < 0.0 else more) / tokens
        chunks = math.ceil(sched.prompt_tokens / tokens)
        return decode, chunk, per_token, chunks

    def _both(self, n: float) -> tuple[float, float]:
        """``(decode(n), chunk(n))`` with one search for ``n``'s segment (what
        :meth:`_at` computes for each, in the same operations); the knots' steps read
        from their lists once timed."""
        ns, last = self.ns, self._last
        if not last:
            return self._knot(0)
        n = 0.0 if n < 0.0 else n  # min(max(n, 0.0), top), as the builtins pick
        top = self._top
        n = top if top < n else n
        j = 1
        while j < last and n > ns[j]:
            j += 1
        if n == ns[j]:
            return self._knot(j)
        # The knots' steps, from their lists once timed (else timed by _knot).
        decode_s, chunk_s = self._decode_s, self._chunk_s
        d_low, c_low = decode_s[j - 1], chunk_s[j - 1]
        if d_low is None or c_low is None:
            d_low, c_low = self._knot(j - 1)
        d_high, c_high = decode_s[j], chunk_s[j]
        if d_high is None or c_high is None:
            d_high, c_high = self._knot(j)
        share = n - ns[j - 1]
        width = ns[j] - ns[j - 1]
        return (
            d_low + (d_high - d_low) * share / width,
            c_low + (c_high - c_low) * share / width,
        )

    def _knot(self, j: int) -> tuple[float, float]:
        """The decode and chunk steps at knot ``j`` (each timed when first read)."""
        decode, chunk = self._decode_s[j], self._chunk_s[j]
        if decode is None:
            decode = self._value(self._decode_s, j, chunk=False)
        if chunk is None:
            chunk = self._value(self._chunk_s, j, chunk=True)
        return decode, chunk

    def chunk_tokens(self, n: float) -> float:
        """Prompt tokens a prompt-carrying step holds beside ``n`` decodes."""
        return float(min(self.sched.prompt_tokens, max(self.sched.budget - math.floor(n), 1)))

    def _value(self, values: list[float | None], j: int, *, chunk: bool) -> float:
        value = values[j]
        if value is None:
            n = self.ns[j]
            value = values[j] = self._step(n, self.chunk_tokens(n) if chunk else 0.0)
        return value

    def _at(self, values: list[float | None], n: float, *, chunk: bool) -> float:
        ns = self.ns
        if len(ns) == 1:
            return self._value(values, 0, chunk=chunk)
        n = min(max(n, 0.0), float(ns[-1]))
        j = 1
        while j < len(ns) - 1 and n > ns[j]:
            j += 1
        if n == ns[j]:  # at a knot, its own step (the saturation rate reads the cap's)
            return self._value(values, j, chunk=chunk)
        low, high = self._value(values, j - 1, chunk=chunk), self._value(values, j, chunk=chunk)
        return low + (high - low) * (n - ns[j - 1]) / (ns[j] - ns[j - 1])

    def decode(self, n: float) -> float:
        """A step of ``n`` decodes alone."""
        return self._at(self._decode_s, n, chunk=False)

    def chunk(self, n: float) -> float:
        """A step of ``n`` decodes and a chunk of prompt."""
        return self._at(self._chunk_s, n, chunk=True)

    def per_prompt_token(self, n: float) -> float:
        """What a prompt token adds to the steps beside ``n`` decodes."""
        return self.point(n)[2]

    def chunks(self, n: float) -> int:
        """Steps one prompt takes beside ``n`` decodes."""
        return self.point(n)[3]

    def mean_step(self, n: float, rate: float) -> float:
        """The mean step beside ``n`` decodes while prompts arrive at ``rate``: a share
        ``f`` of the steps carries a chunk, so that ``f x chunk / step = rate x s``;
        ``inf`` when the prompts alone outrun the steps."""
        decode, _, per_token, _ = self.point(n)
        return _mean_step(decode, per_token, self.sched.prompt_tokens, rate)


def _mean_step(decode: float, per_token: float, prompt_tokens: int, rate: float) -> float:
    """:meth:`StepTable.mean_step` from a point's decode step and per-token cost (a
    caller holding the point reads it without a second look-up)."""
    busy = rate * prompt_tokens * per_token
    return decode / (1 - busy) if busy < 1 else math.inf


def saturation_rate(steps: StepTable) -> float:
    """Arrivals per second at which all ``cap`` slots are always busy: ``cap / (o x
    step)`` where each step carries ``cap x s / o`` prompt tokens' worth of chunks
    (memoized on the table: every load a search asks for reads it)."""
    sat = steps._saturation
    if sat is None:
        sat = steps._saturation = _saturation_rate(steps)
    return sat


def _saturation_rate(steps: StepTable) -> float:
    sched = steps.sched
    cap, o, s = sched.cap, sched.output_tokens, sched.prompt_tokens
    step = steps.decode(cap) + cap * s / o * steps.per_prompt_token(cap)
    return cap / (o * step)


def _erlang_c(servers: int, load: float) -> float:
    """Erlang C: the chance an arrival waits in M/M/c with ``load`` = rate x service time.

    Erlang B from its recursion for few servers, else from the Poisson probability of
    ``servers`` over its distribution function (Wilson-Hilferty's approximation of the
    gamma tail), O(1) so that a search can call it often."""
    if load >= servers:
        return 1.0
    if load <= 0:
        return 0.0
    if servers <= 64:
        b = 1.0
        for k in range(1, servers + 1):
            b = load * b / (k + load * b)
    else:
        pmf = math.exp(servers * math.log(load) - load - math.lgamma(servers + 1))
        k = servers + 1
        z = ((load / k) ** (1 / 3) - (1 - 1 / (9 * k))) / math.sqrt(1 / (9 * k))
        # NormalDist().cdf(z) written out (its own formula: no Python call per search step).
        cdf = max(1.0 - 0.5 * (1.0 + math.erf(z / _SQRT2)), pmf)
        b = min(pmf / cdf, 1.0)
    rho = load / servers
    return b / (1 - rho * (1 - b))


def _occupancy(steps: StepTable, rate: float) -> float:
    """Mean sequences an arrival finds in flight below the cap: ``m = rate x T(m + 1)``,
    the slot time growing with occupancy (one root, to :data:`OCCUPANCY_TOLERANCE`)."""
    sched = steps.sched
    cap = float(sched.cap)
    busy_per_token = rate * sched.prompt_tokens
    decodes = sched.output_tokens - 1
    points, point, unstored = steps._points, steps.point, steps.unstored_point

    def gap(m: float, stored: bool = False) -> float:
        # rate x T(min(m + 1, cap)) - m: T, how long one request holds a slot at that
        # occupancy, is its prompt's chunks and its output's decode steps (the last
        # chunk yields the first token), each step the mean step beside the prompts
        # arriving (:func:`_mean_step`, inline: a search evaluates this thousands of times).
        # The bracket's ends are the same occupancies at every rate (memoized); the
        # secant's iterates are not, and are computed without the memo.
        n = m + 1
        n = cap if cap < n else n
        decode, chunk, per_token, chunks = (points.get(n) or point(n)) if stored else unstored(n)
        busy = busy_per_token * per_token
        mean = decode / (1 - busy) if busy < 1 else math.inf
        return rate * (chunks * chunk + decodes * mean) - m

    low, high = 0.0, cap
    g_low, g_high = gap(low, True), gap(high, True)
    if g_high >= 0:
        return cap
    # Secant steps through the last two points (the gap is nearly linear: the slot time
    # changes slowly with occupancy), each kept inside the bracket of the root (else the
    # bracket's regula falsi, or its midpoint), until the gap is within the tolerance: an
    # occupancy that is exact enough that no percentile falls as the rate rises, so a
    # search over rates may take a verdict from a rate above or below (``keeps``). (A
    # gap of 1% of a sequence let the occupancy, and the TTFT with it, fall by up to
    # 0.3% as the rate rose.) A root at one of the scheduler's discrete steps (the
    # budget's room for a prompt falls by a token per sequence) has no zero gap: after a
    # dozen steps, a bisection to a bracket of the tolerance.
    m0, g0, m1, g1 = low, g_low, high, g_high
    for step in itertools.count():
        width = high - low
        m = m1 - g1 * (m1 - m0) / (g1 - g0) if g1 != g0 else low
        if not low < m < high:
            m = low + width * g_low / (g_low - g_high)
        if step >= 12 or not low < m < high:
            m = low + width / 2
        g = gap(m)
        scale = m if m > 1.0 else 1.0
        if -OCCUPANCY_TOLERANCE * scale <= g <= OCCUPANCY_TOLERANCE * scale:
            return m
        if g > 0:
            low, g_low = m, g
        else:
            high, g_high = m, g
        m0, g0, m1, g1 = m1, g1, m, g
        if high - low <= OCCUPANCY_TOLERANCE * scale:
            break
    return low


def _tail_wait(chance: float, mean_when: float, tail: float) -> float:
    """The ``1 - tail`` quantile of a wait that is 0, or with ``chance`` exponential of
    mean ``mean_when``."""
    if tail >= chance or mean_when <= 0:
        return 0.0
    return mean_when * math.log(chance / tail)


def under_load(steps: StepTable, rate: float, *, serial_prompts: bool = True) -> LoadPoint:
    """The replica at ``rate`` arrivals per second: TTFT and TPOT percentiles.

    ``serial_prompts`` False: a disaggregated decode replica, whose "prompt" is a cache
    that arrives prefilled and joins the next step (no queue of prefills; the step
    function then ignores the prompt tokens, and the first token is one step)."""
    state = _state(steps, rate)
    if isinstance(state, LoadPoint):
        return state
    ttft, tpot = zip(
        *(_quantile_at(steps, rate, state, q, serial_prompts=serial_prompts) for q in QUANTILES),
        strict=True,
    )
    sat, m, wait_p, _ = state
    return LoadPoint(rate, sat, m, wait_p, Percentiles(*ttft), Percentiles(*tpot))


def p95s(steps: StepTable, rate: float) -> tuple[float, float] | None:
    """The p95 TTFT and TPOT at ``rate`` (what :func:`under_load` reports, memoized by
    the rate: an SLO search has read them); None past saturation, where the queue has no
    steady state."""
    state = _state(steps, rate)
    if isinstance(state, LoadPoint):
        return None
    ttft, tpot = _quantile_at(steps, rate, state, 0.95, serial_prompts=True)
    return (ttft, tpot) if math.isfinite(ttft) and math.isfinite(tpot) else None


class _State(NamedTuple):
    """What every percentile at one rate shares: the saturation rate, the mean occupancy
    an arrival finds, the chance it waits for a slot, and that wait's mean."""

    saturation_rate: float
    mean_in_flight: float
    wait_probability: float
    admit_mean_s: float


def _state(steps: StepTable, rate: float) -> "_State | LoadPoint":
    """The shared state at ``rate``; past saturation, the (infinite) point itself
    (memoized on the table: an SLO search asks ``keeps`` then ``under_load`` at a rate)."""
    hit = steps._states.get(rate)
    if hit is None:
        hit = steps._states[rate] = _state_of(steps, rate)
    return hit


def _state_of(steps: StepTable, rate: float) -> "_State | LoadPoint":
    sched = steps.sched
    sat = saturation_rate(steps)
    cap, o = sched.cap, sched.output_tokens
    full_step = steps.mean_step(cap, rate)
    if rate >= sat or not math.isfinite(full_step):
        inf = Percentiles(math.inf, math.inf, math.inf)
        return LoadPoint(rate, sat, float(cap), 1.0, inf, inf)
    m = _occupancy(steps, rate)
    # Admission: cap servers of the saturated slot time (o steps, prompts inside them).
    slot_full = o * full_step
    wait_p = _erlang_c(cap, rate * slot_full)
    admit_mean = slot_full * (1 + SERVICE_SCV) / (2 * max(cap - rate * slot_full, 1e-9))
    return _State(sat, m, wait_p, admit_mean)


def _quantile_at(
    steps: StepTable, rate: float, state: _State, q: float, *, serial_prompts: bool
) -> tuple[float, float]:
    """:func:`_quantile`, memoized on the table by the rate (``state`` is the rate's)."""
    key = (rate, q, serial_prompts)
    hit = steps._quantiles.get(key)
    if hit is None:
        hit = steps._quantiles[key] = _quantile(
            steps, rate, state, q, serial_prompts=serial_prompts
        )
    return hit


def _quantile_occupancy(cap: int, state: _State, q: float) -> float:
    """The occupancy the ``q`` quantile of the TTFT is read at: the normal quantile of
    the Poisson occupancy below the cap, given no wait for a slot; one below the cap when
    the tail waits for one."""
    _, m, wait_p, _ = state
    if 1 - q <= wait_p:
        return cap - 1.0
    # min and max of two as conditionals that pick as the builtins do.
    level = q / (1 - wait_p)
    level = 0.9999 if level > 0.9999 else level
    n = m + _z(level) * math.sqrt(m)
    n = 0.0 if n < 0.0 else n
    return cap - 1.0 if n > cap - 1.0 else n


def chunk_jump_share(
    steps: StepTable, rate: float, kept: int, missed: int, q: float = 0.95
) -> float | None:
    """Where the ``q`` TTFT of ``rate`` shared by ``n`` replicas jumps by a chunk, as the
    share ``1 / n``, between ``kept`` replicas and ``missed`` (both already probed, so
    their states are memoized); None where both read the TTFT at the same number of
    chunks, or more than one apart. A replica search whose turn is such a jump, flat on
    both sides, finds it by the occupancy, which is smooth in the rate.

    A prompt takes more chunks than at occupancy ``n`` once the budget's room beside
    ``floor(n)`` decodes falls below ``prompt / chunks``; the TTFT's quantile is read at
    ``m + z sqrt(m)`` (``m`` the mean occupancy, ``z`` of the chance to wait for a slot
    at the missed end where it is below saturation, else at the kept end): the jump is
    at the mean occupancy where that reaches the threshold, and at the rate whose mean
    occupancy that is (:func:`rate_at_occupancy`)."""
    jump = chunk_jump_rate(steps, rate / kept, rate / missed, q)
    return None if jump is None else jump / rate


def chunk_jump_rate(
    steps: StepTable, kept_rate: float, missed_rate: float, q: float = 0.95
) -> float | None:
    """:func:`chunk_jump_share` between two arrival rates of one replica: where its ``q``
    TTFT jumps by a chunk between ``kept_rate`` and ``missed_rate``, as a rate; None
    where they read it at the same number of chunks, or more than one apart. The states
    of the two rates are the table's (memoized): a rate not probed yet, such as an end of
    :func:`max_rate`'s grid bracket, has its occupancy solved here."""
    sched = steps.sched
    cap = sched.cap
    low = _state(steps, kept_rate)
    high = _state(steps, missed_rate)
    if isinstance(low, LoadPoint) or 1 - q <= low.wait_probability:
        return None
    at_low = _quantile_occupancy(cap, low, q)
    at_high = float(cap) if isinstance(high, LoadPoint) else _quantile_occupancy(cap, high, q)
    chunks = steps.chunks(at_low)
    if steps.chunks(at_high) != chunks + 1:
        return None
    threshold = max(math.floor(sched.budget - sched.prompt_tokens / chunks) + 1, 0)
    wait = low.wait_probability
    if not isinstance(high, LoadPoint) and 1 - q > high.wait_probability:
        wait = high.wait_probability
    level = q / (1 - wait)
    z = _z(0.9999 if level > 0.9999 else level)
    root = (-z + math.sqrt(z * z + 4 * threshold)) / 2
    if root <= 0:
        return None
    return rate_at_occupancy(steps, root * root)


def rate_at_occupancy(steps: StepTable, m: float) -> float:
    """The arrival rate whose mean occupancy (:func:`_occupancy`) is ``m``: the root of
    ``m = rate x T(m + 1)`` in the rate, where the slot time ``T`` is the prompt's chunk
    steps and the output's mean steps, ``decode / (1 - rate x s x per_token)``: with
    ``A`` the chunk steps, ``B`` the decode steps and ``C = s x per_token``, the lesser
    root of ``AC rate^2 - (A + B + mC) rate + m = 0`` (the one below saturation)."""
    sched = steps.sched
    n = m + 1
    n = float(sched.cap) if sched.cap < n else n
    decode, chunk, per_token, chunks = steps.point(n)
    a = chunks * chunk
    b = (sched.output_tokens - 1) * decode
    c = sched.prompt_tokens * per_token
    linear = a + b + m * c
    if a * c <= 0:
        return m / linear if linear > 0 else math.inf
    return (linear - math.sqrt(max(linear * linear - 4 * a * c * m, 0.0))) / (2 * a * c)


def _quantile(
    steps: StepTable, rate: float, state: _State, q: float, *, serial_prompts: bool
) -> tuple[float, float]:
    """TTFT and TPOT at the ``q`` quantile."""
    sched = steps.sched
    cap, o = sched.cap, sched.output_tokens
    _, m, wait_p, admit_mean = state
    tail = 1 - q
    full = tail <= wait_p
    n = _quantile_occupancy(cap, state, q)
    # The prompts ahead: an M/D/1 queue of prefills, each its chunks' steps.
    points = steps._points
    decode, chunk, _, chunks = points.get(n) or steps.point(n)
    prefill = chunks * chunk
    if serial_prompts:
        rho = rate * prefill
        rho = 0.999 if rho > 0.999 else rho
    else:
        rho = 0.0
    prefill_mean = prefill * (1 + SERVICE_SCV) / (2 * (1 - rho))
    admit = _tail_wait(wait_p, admit_mean, tail)
    ahead = _tail_wait(rho, prefill_mean, tail)
    # One wait at this tail and the other one's mean, the larger of the two pairings.
    # Pairing the heavier tail alone switched pairs where the two tails cross, and the
    # percentile fell there as the rate rose, by the mean it stopped adding (the p50 of
    # an 8B replica on an L4 from 8.0 s to 5.3 s at 89% load); the larger pairing is
    # continuous, and each pairing grows with the rate. A decode pool has no queue of
    # prompts: its wait is the admission's alone.
    if serial_prompts:
        waits = max(admit + rho * prefill_mean, ahead + wait_p * admit_mean)
    else:
        waits = admit
    # The rest of the step in progress: its mean behind a queue of prompts; in a
    # decode pool, where it is all the wait below the cap, its quantile (uniform).
    residual = (1 - rho) * decode / 2 if serial_prompts else q * decode
    ttft = prefill + residual + waits
    # TPOT: the mean step over the request's life, at its occupancy's quantile, and
    # the prompts that arrive in that life (Poisson) each adding their chunk steps.
    life = cap if full else min(1 + m + _Z[q] * math.sqrt(m * LIFETIME_VARIANCE), cap)
    life = max(life, 1.0)
    # steps.mean_step(life, rate) and steps.per_prompt_token(life), from one look-up (no
    # other reader asks a life's occupancy again: not memoized).
    life_decode, _, life_per_token, _ = points.get(life) or steps.unstored_point(life)
    tau = _mean_step(life_decode, life_per_token, sched.prompt_tokens, rate)
    span = (o - 1) * tau
    extra = life_per_token * sched.prompt_tokens
    spread = extra * math.sqrt(rate * span) / max(o - 1, 1)
    return ttft, tau + _Z[q] * spread


def within(point: LoadPoint, ttft_p95_s: float | None, tpot_p95_s: float | None) -> bool:
    """Whether ``point`` keeps the p95 targets given."""
    return (ttft_p95_s is None or point.ttft_s.p95 <= ttft_p95_s) and (
        tpot_p95_s is None or point.tpot_s.p95 <= tpot_p95_s
    )


def slo_margin(
    steps: StepTable, rate: float, ttft_p95_s: float | None, tpot_p95_s: float | None
) -> tuple[bool, float]:
    """Whether the replica at ``rate`` keeps the p95 targets given, and its largest p95
    over its target (1 at a target, ``inf`` past saturation), computing the p95s alone.
    The verdict is the comparison itself; the ratio only guides a search to the rate
    where the verdict turns."""
    state = _state(steps, rate)
    if isinstance(state, LoadPoint):
        ttft, tpot = state.ttft_s.p95, state.tpot_s.p95
    else:
        ttft, tpot = _quantile_at(steps, rate, state, 0.95, serial_prompts=True)
    kept, over = True, 0.0
    if ttft_p95_s is not None:
        kept, over = ttft <= ttft_p95_s, ttft / ttft_p95_s
    if tpot_p95_s is not None:
        kept = kept and tpot <= tpot_p95_s
        over = max(over, tpot / tpot_p95_s)
    known = steps._verdicts.get((ttft_p95_s, tpot_p95_s))
    if known is None:
        known = steps._verdicts[(ttft_p95_s, tpot_p95_s)] = [0.0, 0.0, math.inf, math.inf]
    if kept:
        if rate > known[0]:
            known[0], known[1] = rate, over
    elif rate < known[2]:
        known[2], known[3] = rate, over
    return kept, over


def keeps(
    steps: StepTable, rate: float, ttft_p95_s: float | None, tpot_p95_s: float | None
) -> bool:
    """Whether the replica at ``rate`` keeps the p95 targets given: ``within`` of
    :func:`under_load`, computing the p95s alone (a search asks it many times).

    Every percentile grows with the rate (the occupancy is solved exactly; a test holds
    it on a fine grid of rates), so a rate at or below one known to keep the targets
    keeps them, and one at or above a rate known to miss them misses (:func:`_probe`,
    which the rate within the SLO, :func:`max_rate`, probes with)."""
    return _probe(steps, rate, ttft_p95_s, tpot_p95_s)[0]


def _slack(over: float) -> float:
    """How far a p95 is under its target, as the search interpolates it: ``1 / over - 1``,
    0 at the target, -1 past saturation. Near saturation a p95 grows like ``1 / (1 -
    rate / saturation)``, so its inverse is nearly linear in the rate where the targets
    bind, and a secant through two rates lands close to the turn."""
    return 1.0 / over - 1.0 if over > 0 else math.inf


class _Bracket:
    """A search's two ends on a grid of integers (rates of :func:`max_rate`'s grid,
    counts of :func:`fewest_servers`): the one known to keep the targets and the one
    known to miss them, each with its slack (:func:`_slack`). Illinois' rule halves the
    slack of the end not moved when the same end moves twice in a row, so the secant's
    guess leaves it too; ``stalled`` after two probes that failed to halve the bracket
    (a jump or a kink of a p95 defeats the secant), when the search bisects. ``open``:
    an integer lies between the ends. (Attributes, not properties: a request's searches
    read them about a thousand times.)"""

    __slots__ = ("_side", "_stalls", "keep", "miss", "open", "s_keep", "s_miss", "stalled")

    def __init__(self, keep: int, s_keep: float, miss: int, s_miss: float) -> None:
        self.keep, self.s_keep, self.miss, self.s_miss = keep, s_keep, miss, s_miss
        self._side, self._stalls, self.stalled = 0, 0, False
        self.open = abs(keep - miss) > 1

    def bisect(self) -> int:
        """The middle of the bracket, for a probe after a stall (the count of stalls
        starts again)."""
        self._stalls, self.stalled = 0, False
        return (self.keep + self.miss) // 2

    def record(self, at: int, kept: bool, over: float) -> None:
        """A probe at ``at``: its verdict moves one end there."""
        width = abs(self.keep - self.miss)
        if kept:
            self.keep, self.s_keep = at, _slack(over)
            self.s_miss = self.s_miss / 2 if self._side == 1 else self.s_miss
            self._side = 1
        else:
            self.miss, self.s_miss = at, _slack(over)
            self.s_keep = self.s_keep / 2 if self._side == -1 else self.s_keep
            self._side = -1
        left = abs(self.keep - self.miss)
        self._stalls = self._stalls + 1 if 2 * left > width else 0
        self.stalled, self.open = self._stalls >= 2, left > 1


def _nearest_secant(probed: list[tuple[float, float]]) -> float | None:
    """Where the line through the two probes of least slack either way (nearest the turn,
    where a bending curve is most nearly a line) crosses zero slack; None with fewer than
    two, or two of the same slack."""
    if len(probed) < 2:
        return None
    (x0, s0), (x1, s1) = sorted(probed, key=lambda p: abs(p[1]))[:2]
    return None if s0 == s1 else x0 - s0 * (x1 - x0) / (s1 - s0)


def _secant(x_keep: float, s_keep: float, x_miss: float, s_miss: float) -> float:
    """Where the line through the two ends of a bracket crosses zero slack (``s_keep`` >=
    0 > ``s_miss``); an end with infinite slack (no target binds) gives the midpoint."""
    if not math.isfinite(s_keep):
        return (x_keep + x_miss) / 2
    return x_keep + s_keep * (x_miss - x_keep) / (s_keep - s_miss)


MAX_RATE_TOLERANCE = 1e-3
""":func:`max_rate` is within this share below the turn (the figure is shown to three
significant digits)."""

MAX_RATE_GRID = 8192
"""Steps of :func:`max_rate`'s grid of rates, even in the logarithm from a thousandth of
saturation to saturation: each step ``1000 ** (1 / 8192)``, 0.084%, within
:data:`MAX_RATE_TOLERANCE`."""


def max_rate(steps: StepTable, ttft_p95_s: float | None, tpot_p95_s: float | None) -> float:
    """The highest arrival rate the replica serves within the p95 targets, to
    :data:`MAX_RATE_TOLERANCE` below the turn: the highest rate of a fixed grid
    (:data:`MAX_RATE_GRID` even steps of the logarithm from a thousandth of saturation to
    saturation) that keeps them; 0 when not even a trickle, the grid's first rate, does.
    (Halving the rate itself, eight times, left the turn known to a 256th of saturation:
    13% of it where a TTFT target binds at 2% of saturation.)

    The figure is the grid's, so it is the same whatever order the probes come in: the
    search starts from the table's verdicts on either side of the turn (the replica
    search's, :func:`keeps`) and probes where the secant of the slack over the rate puts
    the turn, rounded to the grid: through the two probes nearest the turn once it has
    two (:func:`_nearest_secant`: the slack bends, and a secant through a far end of
    the bracket kept landing short of the turn, a few grid steps a probe), else through
    the bracket's ends with Illinois' rule. Where the ends read the TTFT a chunk apart
    (:func:`chunk_jump_rate`) the turn is at that jump or before it. A bisection of the
    grid follows two probes that halved neither the bracket nor the least slack (a jump
    in a p95 defeats the secant). ``bench/speed/slo_search.py`` counts its probes."""
    sat = saturation_rate(steps)
    if ttft_p95_s is None and tpot_p95_s is None:
        return sat
    first = sat * 1e-3
    step = math.log(1e3) / MAX_RATE_GRID

    def rate_at(i: int) -> float:
        return first * math.exp(i * step)

    low, s_low, high, s_high = _grid_bracket(
        steps._verdicts.get((ttft_p95_s, tpot_p95_s)), rate_at, step, sat
    )
    if low == 0 and not math.isfinite(s_low):
        kept, over = _probe(steps, first, ttft_p95_s, tpot_p95_s)
        if not kept:
            return 0.0
        s_low = _slack(over)
    b = _Bracket(low, s_low, high, s_high)
    # The rates probed here with their slacks. The p95s bend (a queue's wait grows faster
    # than linearly towards saturation), so a secant through the bracket's ends, one of
    # them far, lands on the near side again and again: the secant goes through the two
    # probes nearest the turn (the least slack either way), where the curve is nearly a
    # line, wherever they fell.
    probed: list[tuple[float, float]] = []
    # The least slack seen, and the probes since it last halved: the search bisects only
    # after two probes that halved neither the bracket nor that slack.
    nearest, idle = math.inf, 0
    while b.open:
        low, high = b.keep, b.miss
        x_low, x_high = rate_at(low), rate_at(high)
        if b.stalled and idle >= 2:
            i = b.bisect()
        else:
            guess = _nearest_secant(probed)
            if guess is None:
                guess = _secant(x_low, b.s_keep, x_high, b.s_miss)
            # Where the ends read the TTFT a chunk apart, the turn is at that jump or
            # before it (fewest_servers' rule, in the rate): the jump, unless the slack
            # on the keeping side, which is smooth up to the jump, turns before it.
            jump = chunk_jump_rate(steps, x_low, x_high) if ttft_p95_s is not None else None
            if jump is not None and x_low < jump < x_high:
                before = _nearest_secant([p for p in probed if p[1] >= 0])
                guess = jump if before is None else min(before, jump)
            i = int(math.log(guess / first) / step) if guess > 0 else low
        i = min(max(i, low + 1), high - 1)
        x = rate_at(i)
        kept, over = _probe(steps, x, ttft_p95_s, tpot_p95_s)
        b.record(i, kept, over)
        slack = _slack(over)
        if 0 < over < math.inf:  # past saturation the slack is -1 by convention, off the curve
            probed.append((x, slack))
        idle = 0 if abs(slack) <= nearest / 2 else idle + 1
        nearest = min(nearest, abs(slack))
    return rate_at(b.keep)


def _grid_bracket(
    known: list[float] | None, rate_at: Callable[[int], float], step: float, sat: float
) -> tuple[int, float, int, float]:
    """The grid's indices nearest the turn that the verdicts ``known`` decide (the
    highest rate known to keep the targets, the lowest known to miss them, each with its
    p95 over its target), with their slacks: the grid's ends (saturation misses) where
    none is known; the first rate's slack infinite until it is probed."""
    low, high = 0, MAX_RATE_GRID
    s_low, s_high = math.inf, -1.0
    if known is None:
        return low, s_low, high, s_high
    first = rate_at(0)
    if known[0] >= first:
        low = min(int(math.log(known[0] / first) / step), MAX_RATE_GRID - 1)
        while low > 0 and rate_at(low) > known[0]:
            low -= 1
        s_low = _slack(known[1])
    if known[2] < sat:
        high = max(math.ceil(math.log(known[2] / first) / step), 1)
        while high < MAX_RATE_GRID and rate_at(high) < known[2]:
            high += 1
        s_high = _slack(known[3])
    return low, s_low, high, s_high


def _probe(
    steps: StepTable, rate: float, ttft_p95_s: float | None, tpot_p95_s: float | None
) -> tuple[bool, float]:
    """:func:`slo_margin` at ``rate``, or the verdict already known there (its over
    taken from the bracket's end: only a guide)."""
    known = steps._verdicts.get((ttft_p95_s, tpot_p95_s))
    if known is not None:
        if rate <= known[0]:
            return True, known[1]
        if rate >= known[2]:
            return False, known[3]
    return slo_margin(steps, rate, ttft_p95_s, tpot_p95_s)


def fewest_servers(
    probe: Callable[[int], tuple[bool, float]],
    low: int,
    high: int,
    over_low: float,
    over_high: float,
    *,
    jump: Callable[[int, int], float | None] | None = None,
) -> int:
    """The least count in ``(low, high]`` whose share of the rate keeps the targets,
    ``probe`` giving :func:`slo_margin` at a count, given that ``low`` misses and ``high``
    keeps them, by ``over_low`` and ``over_high`` (the p95s fall as the count rises).

    Each probe goes where the secant of the slack over the share ``1 / n`` puts the turn,
    rounded up (the count there keeps if the guess is right, and one fewer then ends the
    search), with Illinois' rule (an end kept twice has its slack halved, so the other
    end moves too); a bisection of the counts' ratio after two probes that fail to halve
    the bracket (the p95 TTFT jumps where a prompt takes one more chunk, and the secant
    cannot see a jump). Exact whatever the guesses: it ends on a count that keeps next to
    one that misses. ``bench/speed/slo_search.py`` counts its probes against doubling
    and a bisection's over the catalog.

    ``jump`` (:func:`chunk_jump_share`): where the two ends read the TTFT a chunk apart,
    the turn is at that jump or before it, and the probe goes to the share the jump is
    guessed at (the p95 is flat on both sides of it, the occupancy is not); rounded up,
    it keeps if the turn is the jump, and one fewer then ends the search; else the ends
    are within one chunk and the slack's secant goes on."""
    b = _Bracket(high, _slack(over_high), low, _slack(over_low))
    while b.open:
        high, low = b.keep, b.miss
        if b.stalled:
            b.bisect()
            n = round(math.sqrt(low * high))
        else:
            guess = jump(high, low) if jump is not None else None
            if guess is None:
                guess = _secant(1 / high, b.s_keep, 1 / low, b.s_miss)
            n = math.ceil(1 / guess - 1e-9) if guess > 0 else high
        n = min(max(n, low + 1), high - 1)
        b.record(n, *probe(n))
    return b.keep


class PrefillWait(NamedTuple):
    """A prompt at a disaggregated prefill replica: its wait and its own batch."""

    mean_wait_s: float
    wait_s: Percentiles
    batch_s: float
    """The batch the prompt runs in: the prompts that arrive during one full batch,
    ``rho x batch``, between one and ``batch`` (below saturation a replica runs what is
    waiting, mostly fewer than it could), timed between one prompt's and the full batch's."""


def prefill_pool_wait(rate: float, batch_s: float, batch: int, single_s: float) -> PrefillWait:
    """A prompt at a disaggregated prefill replica that runs, whenever it is free, the
    waiting prompts (up to ``batch``: ``batch_s``; one alone: ``single_s``) as one batch,
    at ``rate`` arrivals per second. The wait is an M/D/1 queue of the full batch's time
    per prompt (a busy replica fills its batches): 0 with probability ``1 - rho``, else
    exponential of the Pollaczek-Khinchine mean, as the prefill queue of
    :func:`under_load`; p50/p95/p99 and the mean. Infinite at or past saturation.
    ``bench/serving/disagg_queue.py`` checks it against a simulation of that replica."""
    per_prompt = batch_s / max(batch, 1)
    rho = rate * per_prompt
    if rho >= 1:
        inf = math.inf
        return PrefillWait(inf, Percentiles(inf, inf, inf), batch_s)
    when = per_prompt * (1 + SERVICE_SCV) / (2 * (1 - rho))
    waits = Percentiles(*(_tail_wait(rho, when, 1 - q) for q in QUANTILES))
    size = min(max(rho * batch, 1.0), float(batch))
    own = single_s + (batch_s - single_s) * (size - 1) / (batch - 1) if batch > 1 else batch_s
    return PrefillWait(rho * when, waits, own)
