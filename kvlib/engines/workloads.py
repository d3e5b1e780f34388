"""Request streams for the paging simulator: (prompt_tokens, output_tokens) rows and arrival steps.

The synthetic ShareGPT and Alpaca workloads match the mean lengths that the vLLM paper
(Kwon et al., SOSP 2023, arXiv:2309.06180, Fig. 11) prints for the two traces; the numbers and
their sources live in ``data/workloads.csv``. The paper publishes means and histograms only, so
each length is a discretised log-normal whose log-standard deviation ``sigma`` is our assumption
(chosen for the right-skewed shape of Fig. 11) and whose location is solved so that the mean of
the truncated, discretised distribution equals the published mean exactly.
"""
from __future__ import annotations

import csv
import math
import numbers
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..core.checks import integer, number, positive_integer
from ..core.data import csv_path


def published_stats() -> dict[tuple[str, str], float]:
    """``{(name, stat): value}`` from ``data/workloads.csv`` (e.g. ``("sharegpt", "mean_output_tokens")``),
    read again when the file (or ``$KVLIB_DATA``) changes."""
    return _read_stats(*_stats_file())[0]


def _stats_file() -> tuple[Path, int, int]:
    path = csv_path("workloads.csv")
    st = path.stat()
    return path, st.st_mtime_ns, st.st_size


@lru_cache(maxsize=4)
def _read_stats(path: Path, mtime_ns: int, size: int
                ) -> tuple[dict[tuple[str, str], float], dict[tuple[str, str], int]]:
    """The values of ``path`` by (name, stat), and the line of each in the file."""
    values, lines = {}, {}
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        for row in reader:
            key = (row["name"], row["stat"])
            values[key], lines[key] = float(row["value"]), reader.line_num
    return values, lines


class _Stats:
    """``data/workloads.csv``'s rows for one workload, each read with a ValueError naming the
    file, the line and the row when it is missing or out of range."""

    def __init__(self) -> None:
        self.path, mtime, size = _stats_file()
        self.values, self.lines = _read_stats(self.path, mtime, size)

    def where(self, name: str, stat: str) -> str:
        line = self.lines.get((name, stat))
        return f"{self.path}{'' if line is None else f' line {line}'} ({name}, {stat})"

    def value(self, name: str, stat: str) -> float:
        if (name, stat) not in self.values:
            raise ValueError(f"{self.path} has no row with name {name} and stat {stat}")
        return self.values[(name, stat)]

    def tokens(self, name: str, stat: str, minimum: int) -> int:
        value = self.value(name, stat)
        if value != int(value) or value < minimum:
            raise ValueError(f"{self.where(name, stat)}: {value:g} must be a whole number of "
                             f"tokens >= {minimum:,}")
        return int(value)


@dataclass(frozen=True)
class LengthDist:
    """A log-normal length rounded to whole tokens and truncated to ``[min_tokens, max_tokens]``.

    ``mean_tokens`` is the exact mean of the truncated discrete distribution (tokens);
    ``sigma`` is the standard deviation of ln(length) before truncation (dimensionless).
    """

    mean_tokens: float
    sigma: float
    min_tokens: int
    max_tokens: int

    def __post_init__(self) -> None:
        number("mean_tokens", self.mean_tokens)
        number("sigma", self.sigma, positive=True)
        integer("min_tokens", self.min_tokens, None)
        integer("max_tokens", self.max_tokens, None)
        if not 1 <= self.min_tokens < self.max_tokens:
            raise ValueError(f"need 1 <= min_tokens < max_tokens, got {self.min_tokens}, {self.max_tokens}")
        if not self.min_tokens < self.mean_tokens < self.max_tokens:
            raise ValueError(f"mean_tokens {self.mean_tokens} must lie strictly inside "
                             f"[{self.min_tokens}, {self.max_tokens}]")

    def unsolved(self) -> str:
        """Why no log-normal of this ``sigma`` has the mean (a clause), or "" when one has: a
        spread far from 1 leaves the solved distribution on one or two lengths, its mean off."""
        values, probs = _pmf(self.mean_tokens, self.sigma, self.min_tokens, self.max_tokens)
        got = float(values @ probs)
        if math.isfinite(got) and abs(got - self.mean_tokens) <= 1e-6 * self.mean_tokens:
            return ""
        return (f"no log-normal of that spread truncated to [{self.min_tokens:,}, "
                f"{self.max_tokens:,}] tokens solves to a mean of {self.mean_tokens:g} tokens "
                f"(got {got:.6g}); use a spread nearer 1")

    def pmf(self) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
        """(lengths in tokens, probabilities summing to 1); ValueError when ``sigma`` is so far
        from 1 that the mean cannot be solved (``unsolved``)."""
        problem = self.unsolved()
        if problem:
            raise ValueError(f"sigma {self.sigma:g}: {problem}")
        return _pmf(self.mean_tokens, self.sigma, self.min_tokens, self.max_tokens)

    def mean(self) -> float:
        """Exact mean of the discrete distribution (tokens)."""
        values, probs = self.pmf()
        return float(values @ probs)

    def sample(self, n: int, rng: np.random.Generator) -> NDArray[np.int64]:
        """``n`` lengths (tokens) by inverse-CDF sampling with ``rng``."""
        values, probs = self.pmf()
        cdf = np.cumsum(probs)
        idx = np.searchsorted(cdf, rng.random(n) * cdf[-1], side="right")
        return values[np.minimum(idx, len(values) - 1)]


def _probs(mu: float, sigma: float, lo: int, hi: int) -> NDArray[np.float64]:
    edges = np.log(np.arange(lo, hi + 2, dtype=np.float64) - 0.5)
    z = (edges - mu) / (sigma * math.sqrt(2.0))
    cdf = 0.5 * (1.0 + np.array([math.erf(x) for x in z]))
    probs = np.diff(cdf)
    with np.errstate(invalid="ignore", divide="ignore"):  # all zero: NaN, caught by unsolved()
        return probs / probs.sum()


@cache
def _pmf(mean: float, sigma: float, lo: int, hi: int) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    values = np.arange(lo, hi + 1, dtype=np.int64)
    low, high = math.log(lo) - 10 * sigma, math.log(hi) + 10 * sigma
    for _ in range(200):  # bisection on mu: the truncated mean increases with mu
        mu = 0.5 * (low + high)
        if float(values @ _probs(mu, sigma, lo, hi)) < mean:
            low = mu
        else:
            high = mu
    probs = _probs(0.5 * (low + high), sigma, lo, hi)
    probs.setflags(write=False)
    values.setflags(write=False)
    return values, probs


def _dists(name: str, sigma_prompt: float, sigma_output: float,
           max_output_tokens: int | None = None) -> tuple[LengthDist, LengthDist]:
    stats = _Stats()
    lo = stats.tokens("sharegpt", "min_tokens", 1)
    hi = stats.tokens("sharegpt", "max_prompt_tokens", lo + 1)
    longest = stats.tokens("sharegpt", "max_total_tokens", hi + lo) - lo
    top = hi if max_output_tokens is None else integer("max_output_tokens", max_output_tokens,
                                                       None)
    if not hi <= top <= longest:
        raise ValueError(f"max_output_tokens must lie in [{hi}, {longest}] tokens, got {top}")
    means = []
    for stat, limit in (("mean_prompt_tokens", hi), ("mean_output_tokens", top)):
        mean = stats.value(name, stat)
        if not lo < mean < limit:
            raise ValueError(f"{stats.where(name, stat)}: {mean:g} tokens must lie strictly "
                             f"inside [{lo:,}, {limit:,}] (sharegpt min_tokens, "
                             f"{'max_prompt_tokens' if limit == hi else 'max_output_tokens'})")
        means.append(mean)
    return (LengthDist(means[0], sigma_prompt, lo, hi),
            LengthDist(means[1], sigma_output, lo, top))


# ln-space standard deviations (assumptions, not published): ShareGPT is the more variable trace (§6.1).
SHAREGPT_SIGMA = (1.0, 1.0)
ALPACA_SIGMA = (0.5, 0.8)


def sharegpt_dists(output_sigma: float | None = None,
                   max_output_tokens: int | None = None) -> tuple[LengthDist, LengthDist]:
    """(prompt, output) length distributions with the ShareGPT means of Fig. 11a: 161.31 and 337.99 tokens.

    ``output_sigma`` (default ``SHAREGPT_SIGMA[1]``) and ``max_output_tokens`` (default 1,024; at
    most 2,044 = 2,048 − the 4-token minimum prompt) reshape the output tail at the same mean.
    """
    sigma_output = (SHAREGPT_SIGMA[1] if output_sigma is None
                    else number("output_sigma", output_sigma, positive=True))
    dists = _dists("sharegpt", SHAREGPT_SIGMA[0], sigma_output, max_output_tokens)
    problem = dists[1].unsolved()
    if problem:
        raise ValueError(f"output_sigma {sigma_output:g}: {problem}")
    return dists


def alpaca_dists() -> tuple[LengthDist, LengthDist]:
    """(prompt, output) length distributions with the Alpaca means of Fig. 11b: 19.31 and 58.45 tokens."""
    return _dists("alpaca", *ALPACA_SIGMA)


def _sample(dists: tuple[LengthDist, LengthDist], n: int, seed: int,
            max_total_tokens: int | None = None) -> NDArray[np.int64]:
    n = positive_integer("n", n)
    rng = np.random.default_rng(integer("seed", seed))
    prompt = dists[0].sample(n, rng)
    output = dists[1].sample(n, rng)
    if max_total_tokens is not None:  # draw pairs over the limit again, as the sampler prunes them
        while (bad := np.flatnonzero(prompt + output > max_total_tokens)).size:
            prompt[bad] = dists[0].sample(bad.size, rng)
            output[bad] = dists[1].sample(bad.size, rng)
    return np.column_stack([prompt, output])


def sharegpt(n: int, seed: int = 0, *, output_sigma: float | None = None,
             max_output_tokens: int | None = None) -> NDArray[np.int64]:
    """``n`` ShareGPT-like requests, an (n, 2) array of (prompt_tokens, output_tokens), seeded.

    ``output_sigma`` and ``max_output_tokens`` as in ``sharegpt_dists``; pairs longer than the
    sampler's 2,048 tokens are drawn again, so with a cap above 1,024 the sample means move
    slightly off the published ones (the defaults never redraw and keep the same stream).
    """
    n, seed = positive_integer("n", n), integer("seed", seed)
    dists = sharegpt_dists(output_sigma, max_output_tokens)
    return _sample(dists, n, seed, _Stats().tokens("sharegpt", "max_total_tokens", 2))


def alpaca(n: int, seed: int = 0) -> NDArray[np.int64]:
    """``n`` Alpaca-like requests, an (n, 2) array of (prompt_tokens, output_tokens), seeded."""
    n, seed = positive_integer("n", n), integer("seed", seed)
    return _sample(alpaca_dists(), n, seed)


def fixed(n: int, prompt_tokens: int, output_tokens: int) -> NDArray[np.int64]:
    """``n`` identical requests of ``prompt_tokens`` + ``output_tokens``."""
    n = positive_integer("n", n)
    return from_arrays(np.full(n, positive_integer("prompt_tokens", prompt_tokens)),
                       np.full(n, positive_integer("output_tokens", output_tokens)))


def random_lengths(n: int, input_len: int, output_len: int, range_ratio: float = 0.0,
                   seed: int = 0) -> NDArray[np.int64]:
    """``n`` requests as ``vllm bench serve --dataset-name random`` draws them: prompt and output
    lengths uniform on [len × (1 − range_ratio), len × (1 + range_ratio)] (whole tokens, at
    least 1), seeded."""
    n = positive_integer("n", n)
    input_len = positive_integer("input_len", input_len)
    output_len = positive_integer("output_len", output_len)
    if not 0 <= number("range_ratio", range_ratio) < 1:
        raise ValueError(f"range_ratio must be in [0, 1), got {range_ratio!r}")
    rng = np.random.default_rng(integer("seed", seed))

    def draw(length: int) -> NDArray[np.int64]:
        lo, hi = max(1, int(length * (1 - range_ratio))), max(1, int(length * (1 + range_ratio)))
        return rng.integers(lo, hi + 1, size=n)
    return from_arrays(draw(input_len), draw(output_len))


def from_arrays(prompt_tokens: ArrayLike, output_tokens: ArrayLike) -> NDArray[np.int64]:
    """Stack user-supplied prompt and output lengths (tokens, each >= 1) into an (n, 2) array."""
    prompt = np.asarray(prompt_tokens)
    output = np.asarray(output_tokens)
    if prompt.ndim != 1 or prompt.shape != output.shape or prompt.size == 0:
        raise ValueError(f"need two non-empty 1-D arrays of equal length, got shapes "
                         f"{prompt.shape} and {output.shape}")
    requests = np.column_stack([prompt, output])
    return as_requests(requests)


def as_requests(requests: ArrayLike) -> NDArray[np.int64]:
    """Validate an (n, 2) array-like of (prompt_tokens, output_tokens) and return it as int64."""
    arr = np.asarray(requests)
    if arr.ndim != 2 or arr.shape[1] != 2 or arr.shape[0] == 0:
        raise ValueError(f"requests must be a non-empty (n, 2) array of (prompt_tokens, output_tokens), "
                         f"got shape {arr.shape}")
    if arr.dtype.kind not in "iuf" or (arr.dtype.kind == "f" and not np.all(np.isfinite(arr)
                                                                             & (arr == np.round(arr)))):
        raise ValueError("requests must hold whole token counts")
    out = arr.astype(np.int64)
    for col, name in ((0, "prompt_tokens"), (1, "output_tokens")):
        bad = np.flatnonzero(out[:, col] < 1)
        if bad.size:
            raise ValueError(f"{name} must be >= 1; request {int(bad[0])} has {int(out[bad[0], col])}")
    return out


#: The last step an arrival may fall on (2⁴⁰ ≈ 1.1·10¹²: 35 years of 1 ms steps). Step
#: counters stay far from int64's 9.2·10¹⁸ and exact in a float.
MAX_ARRIVAL_STEP = 2**40


def poisson_arrivals(n: int, rate_per_step: float, seed: int = 0) -> NDArray[np.int64]:
    """Arrival step of each of ``n`` requests from a Poisson process of ``rate_per_step`` requests/step.

    Exponential gaps of mean ``1 / rate_per_step`` steps, accumulated and floored to whole steps.
    A rate so low that the arrivals pass ``MAX_ARRIVAL_STEP`` is a ValueError (the int64 step
    counter would overflow and wrap to negative steps).
    """
    if isinstance(rate_per_step, bool) or not isinstance(rate_per_step, numbers.Real) \
            or not (math.isfinite(rate_per_step) and rate_per_step > 0):
        raise ValueError(f"arrival rate must be a finite number > 0 requests/step, got {rate_per_step!r}")
    n = integer("number of requests", n, minimum=1)
    with np.errstate(over="ignore", divide="ignore"):
        gaps = np.random.default_rng(integer("seed", seed)).exponential(1.0 / float(rate_per_step), size=n)
        steps = np.cumsum(gaps)
    if not np.isfinite(steps[-1]) or steps[-1] > MAX_ARRIVAL_STEP:
        raise ValueError(f"arrival rate {float(rate_per_step):g} requests/step spreads {n:,} "
                         f"requests past step {MAX_ARRIVAL_STEP:,}, the last simulate counts")
    return np.floor(steps).astype(np.int64)
