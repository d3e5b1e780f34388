"""Claims → recomputed value → verdict.

A claim is one row of a ``data/claims/*.csv`` file: the figure as published, its unit, and which kvlib
computation rechecks it with which inputs (JSON). ``recheck(claim)`` recomputes it and gives a
verdict from a fixed set with a one-line reason; tolerances follow the claim's own precision.
``recheck_all()`` does every row and reports a bad row (unknown computation, missing input, bad
JSON) as verdict ``"error"`` with the problem as its reason, instead of raising.

Columns beyond the required ``id,claim,source,section,quantity,claimed,unit,computation,inputs,
notes`` (all optional, empty = unused):

* ``tolerance`` — absolute tolerance in the claim's unit, for claims whose digits overstate
  their precision ("about 56 GB", "60–80%"); default: half a unit of the last stated digit.
* ``alt_inputs`` — JSON ``{label: {input overrides}}``: other readings of the claim (total
  instead of per GPU, another model, another dtype). A claim off under its own reading but right
  under one of these is a ``unit slip`` naming the label — or the verdict given by the reading's
  ``"_verdict"`` key (e.g. ``"misleading"`` for a condition the claim drops).
* ``per_gpu_factor`` — n GPUs: shorthand for the two readings "total over n GPUs" (×n) and
  "per GPU of n" (÷n).
* ``verdict_override`` + ``override_reason`` — a judgement the arithmetic cannot make
  (``misleading``, ``outdated``, ``unverifiable``...), recorded in data; the recomputed value
  and the automatic verdict are still reported.
* ``computation = "unverifiable"`` — no primary source or inputs to recompute from.
* A claim whose computation only re-reads its source (``QUOTING``: a quoted measurement, an
  engine's documented default, a vendor's own price list) and agrees with it is ``quoted``, not
  ``holds``: the recheck confirms the quotation, not the figure.
* ``expected_verdict`` — the verdict the book's prose explains for this claim; ``unexpected``
  lists the claims whose recheck no longer gives it, and each chapter asserts there are none.

The module itself is callable: ``kvlib.recheck("a01")`` is ``kvlib.recheck.recheck("a01")``.
"""
from __future__ import annotations

import ast
import json
import math
import numbers
import operator
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import pandas as pd

from ..core.checks import integer, number
from ..core.data import load_json
from ..serve.cost import cost_per_million_tokens
from ..model.registry import data_dir, load_model
from .tables import Table, number_text, table
from ..core.units import GB, GIB, KB, KIB, MB, MIB, dtype_bytes

TB, TIB = 1000**4, 1024**4
VERDICTS = ("holds", "rounding", "unit slip", "misleading", "outdated", "wrong", "quoted",
            "unverifiable")
#: What ``recheck_all`` reports for a row it cannot evaluate (not a verdict on the claim).
ERROR = "error"
#: The computation name for claims with no primary source or inputs to recompute from.
UNVERIFIABLE = "unverifiable"

#: Columns every claims file must have (``CONTRIBUTING.md``).
REQUIRED_COLUMNS = ("id", "claim", "source", "section", "quantity", "claimed", "unit",
                    "computation", "inputs", "notes")
OPTIONAL_COLUMNS = ("source_url", "cite", "tolerance", "alt_inputs", "per_gpu_factor",
                    "verdict_override", "override_reason", "expected_verdict")

#: Byte units a claim may be stated in, and the unit a writer may have meant instead.
BYTE_UNITS = {"bytes": 1, "KiB": KIB, "MiB": MIB, "GiB": GIB, "TiB": TIB,
              "KB": KB, "MB": MB, "GB": GB, "TB": TB}
UNIT_SLIPS = {"KiB": "KB", "KB": "KiB", "MiB": "MB", "MB": "MiB", "GiB": "GB", "GB": "GiB",
              "TiB": "TB", "TB": "TiB"}
#: Raw value (as a computation returns it) per one claimed unit, for the non-byte units that scale.
#: Computations return fractions for ``%``; every other unit is taken as stated (scale 1).
SCALED_UNITS = {"%": 0.01, "K tokens": 1e3, "M tokens": 1e6}


# --- computations ------------------------------------------------------------------------------

def _kv_per_token(model: str, dtype: str = "bf16", tp: int = 1) -> int:
    return load_model(model).kv_bytes_per_token(dtype, tp=tp)


def _kv_bytes(model: str, tokens: int, dtype: str = "bf16", requests: int = 1, tp: int = 1) -> int:
    return requests * load_model(model).kv_bytes(tokens, dtype, tp=tp)


def _divisor_kv(model: str, dtype: str = "bf16") -> int:
    """``model``'s per-token KV bytes, to divide by: ValueError when it caches nothing per token."""
    per_token = _kv_per_token(model, dtype)
    if per_token == 0:
        raise ValueError(f"{model} caches nothing per token (only a constant state): "
                         "no per-token ratio")
    return per_token


def _kv_ratio(model: str, baseline: str, dtype: str = "bf16") -> float:
    """How many times more per-token KV ``baseline`` stores than ``model``."""
    return _kv_per_token(baseline, dtype) / _divisor_kv(model, dtype)


def _kv_formula(n_layers: int, n_kv_heads: int, head_dim: int, dtype: str = "bf16",
                tokens: int = 1, requests: int = 1) -> float:
    """2·L·K·H·b bytes per token × tokens × requests, for a model outside the registry."""
    for name, value in (("n_layers", n_layers), ("n_kv_heads", n_kv_heads), ("head_dim", head_dim),
                        ("tokens", tokens), ("requests", requests)):
        number(name, value, positive=True)
    return 2 * n_layers * n_kv_heads * head_dim * dtype_bytes(dtype) * tokens * requests


def _kv_saving(model: str, baseline: str, dtype: str = "bf16", baseline_dtype: str = "bf16") -> float:
    """Fraction of ``baseline``'s per-token KV that ``model`` (in ``dtype``) no longer stores."""
    return 1 - _kv_per_token(model, dtype) / _divisor_kv(baseline, baseline_dtype)


def _weight_bytes(n_params: float, dtype: str = "bf16") -> float:
    """Bytes of ``n_params`` weights stored in ``dtype`` (no scales, no padding)."""
    return number("n_params", n_params, positive=True) * dtype_bytes(dtype)


def _ratio(numerator: float, denominator: float) -> float:
    numerator, denominator = number("numerator", numerator), number("denominator", denominator)
    if denominator == 0:
        raise ValueError("denominator is zero")
    return numerator / denominator


def _change(before: float, after: float) -> float:
    """Relative change ``after / before − 1`` (a fraction: 0.58 is +58%)."""
    return _ratio(after, before) - 1


def _usd_per_million_tokens(usd_per_hour: float, tokens_per_s: float) -> float:
    """$/hour ÷ (tokens/s × 3600 s/hour) × 10⁶ (``kvlib.cost.cost_per_million_tokens``)."""
    return cost_per_million_tokens(usd_per_hour, tokens_per_s)


def _kv_tokens(model: str, pool_bytes: float, dtype: str = "bf16", tp: int = 1) -> int:
    """Whole tokens of ``model``'s per-token KV that fit in ``pool_bytes`` on one GPU."""
    return int(pool_bytes // _kv_per_token(model, dtype, tp))


def _quoted(value: float, where: str) -> float:
    """A figure as its primary source states it, raw (a fraction for %; ``where``: the place).

    For claims that quote a source (a default, a measurement): the recheck is the re-reading.
    """
    if not str(where).strip():
        raise ValueError("quoted needs 'where': the place in the primary source")
    return float(value)


_OPERATORS: dict[type, Callable[..., float]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Pow: operator.pow, ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}


#: Names every ``arithmetic`` expression may use (inputs of the same name take precedence).
ARITHMETIC_CONSTANTS = {**BYTE_UNITS, "hours": 3600.0, "days": 86400.0}

#: Bounds of one ``arithmetic`` formula: characters, nodes and nesting of its syntax tree, calls
#: of other computations, the magnitude of every number in it (literal, input or intermediate
#: result; the book's largest is ~10¹⁵ FLOP/s) and seconds of evaluation (checked between
#: steps: a computation it calls is bounded by its own argument checks).
FORMULA_LIMITS = {"chars": 1_000, "nodes": 200, "depth": 24, "calls": 8,
                  "magnitude": 1e100, "seconds": 10.0}


def _formula_error(expr: object, problem: str) -> ValueError:
    shown = str(expr) if len(str(expr)) <= 80 else str(expr)[:77] + "..."
    return ValueError(" ".join(f"formula {shown!r}: {problem}".split()))


def _depth(node: ast.AST) -> int:
    """Nesting of ``node``'s syntax tree, iteratively (no recursion on a deep tree)."""
    deepest, stack = 0, [(node, 1)]
    while stack:
        current, level = stack.pop()
        deepest = max(deepest, level)
        stack.extend((child, level + 1) for child in ast.iter_child_nodes(current))
    return deepest


def _bounded(value: Any, what: str) -> Any:
    """``value`` if it is a real number within ``FORMULA_LIMITS['magnitude']`` (or a string)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{what} is {type(value).__name__} {value!r}, not a real number")
    limit = FORMULA_LIMITS["magnitude"]
    if isinstance(value, numbers.Integral):
        if abs(int(value)) > limit:  # an int compares with the float bound exactly
            raise ValueError(f"{what} exceeds {limit:g} in magnitude")
        return value
    if not math.isfinite(value) or abs(value) > limit:
        raise ValueError(f"{what} exceeds {limit:g} in magnitude")
    return value


def _power(base: float, exponent: float) -> float:
    """``base ** exponent`` after checking that the result stays within the magnitude bound."""
    if base < 0 and not float(exponent).is_integer():
        raise ValueError(f"{base!r} ** {exponent!r} is not a real number")
    if base == 0 and exponent < 0:
        raise ZeroDivisionError
    if base != 0 and exponent * math.log10(abs(base)) > math.log10(FORMULA_LIMITS["magnitude"]):
        raise ValueError(f"{base!r} ** {exponent!r} exceeds {FORMULA_LIMITS['magnitude']:g} "
                         "in magnitude")
    return base ** exponent


def _arithmetic(expr: str, **names: Any) -> float:
    """Evaluate ``expr``: numbers, + − × ÷ // **, parentheses, the other inputs and the unit
    constants (``GiB``, ``GB``, ...) by name, and calls of the other computations with literal
    arguments, e.g. ``"kv_bytes('llama-3-70b', 131072) / (80 * GiB)"``.

    For claims that are arithmetic on published figures, within ``FORMULA_LIMITS``; anything
    else raises a one-line ValueError naming the formula.
    """
    scope = {**ARITHMETIC_CONSTANTS, **names}
    functions = {k: f for k, f in COMPUTATIONS.items() if k != "arithmetic"}
    text = str(expr)
    if len(text) > FORMULA_LIMITS["chars"]:
        raise _formula_error(text, f"longer than {FORMULA_LIMITS['chars']:,} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise _formula_error(text, "does not parse") from None
    if sum(1 for _ in ast.walk(tree)) > FORMULA_LIMITS["nodes"]:
        raise _formula_error(text, f"has more than {FORMULA_LIMITS['nodes']} terms")
    if _depth(tree) > FORMULA_LIMITS["depth"]:
        raise _formula_error(text, f"nests deeper than {FORMULA_LIMITS['depth']} levels")
    deadline = time.monotonic() + FORMULA_LIMITS["seconds"]
    calls = 0

    def arg(node: ast.AST) -> Any:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        return ev(node)

    def ev(node: ast.AST) -> Any:
        nonlocal calls
        if time.monotonic() > deadline:
            raise ValueError(f"took more than {FORMULA_LIMITS['seconds']:g} s")
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) \
                and not isinstance(node.value, bool):
            shown = f"{node.value:.6g}" if abs(node.value) >= 1e16 else repr(node.value)
            return _bounded(node.value, f"the number {shown}")
        if isinstance(node, ast.Name):
            if node.id not in scope:
                raise ValueError(f"names {node.id!r}, which is not an input")
            return _bounded(scope[node.id], f"input {node.id!r}")
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            left, right = ev(node.left), ev(node.right)
            op = _power if isinstance(node.op, ast.Pow) else _OPERATORS[type(node.op)]
            return _bounded(op(left, right), "an intermediate result")
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](ev(node.operand))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id not in functions:
                raise ValueError(f"calls {node.func.id!r}, which is not a computation")
            if any(k.arg is None for k in node.keywords) or any(
                    isinstance(a, ast.Starred) for a in node.args):
                raise ValueError("a call takes plain arguments, no * or **")
            calls += 1
            if calls > FORMULA_LIMITS["calls"]:
                raise ValueError(f"calls more than {FORMULA_LIMITS['calls']} computations")
            args = [arg(a) for a in node.args]
            keywords = {k.arg: arg(k.value) for k in node.keywords}
            try:
                result = functions[node.func.id](*args, **keywords)
            except (TypeError, ArithmeticError) as exc:
                raise ValueError(f"{node.func.id}: {exc}") from None
            return _bounded(result, f"{node.func.id}(...)")
        raise ValueError("only numbers, names, computations and + - * / // ** are allowed")

    try:
        return float(ev(tree))
    except ZeroDivisionError:
        raise _formula_error(text, "divides by zero") from None
    except OverflowError:
        raise _formula_error(text, f"exceeds {FORMULA_LIMITS['magnitude']:g} in magnitude") from None
    except KeyError as exc:
        raise KeyError(_formula_error(text, str(exc.args[0] if exc.args else exc)).args[0]) from None
    except ValueError as exc:
        raise _formula_error(text, str(exc)) from None


def _kv_bits_saving(model: str, baseline: str, bits: float, baseline_bits: float = 16) -> float:
    """Fraction of ``baseline``'s per-token KV saved when ``model`` stores ``bits`` per element
    on average and ``baseline`` ``baseline_bits`` (DeepSeek-V2's "6 bits on average")."""
    bits, baseline_bits = (number(name, value, positive=True) for name, value in
                           (("bits", bits), ("baseline_bits", baseline_bits)))
    _divisor_kv(baseline)
    return 1 - (load_model(model).kv_elements_per_token() * bits
                / (load_model(baseline).kv_elements_per_token() * baseline_bits))


def _gqa_saving(model: str) -> float:
    """Query heads per KV head: what GQA saves against the same model as MHA."""
    m = load_model(model)
    kv_heads = {layer.n_kv_heads for layer in m.layers if hasattr(layer, "n_kv_heads")}
    if m.n_heads is None or len(kv_heads) != 1:
        raise ValueError(f"{model}: needs one KV-head count and a query-head count")
    return m.n_heads / kv_heads.pop()


def _mla_elements_per_layer(model: str) -> int:
    """Elements an MLA layer caches per token: latent rank + decoupled RoPE key."""
    widths = {layer.elements_per_token() for layer in load_model(model).layers
              if layer.kind == "mla"}
    if len(widths) != 1:
        raise ValueError(f"{model} has no (uniform) MLA layers")
    return widths.pop()


def _pattern_layers(n_layers: int, pattern: str, kind: str = "sliding") -> int:
    """Layers of ``kind`` in an ``n_layers`` stack described by a pattern such as "LLLG"."""
    from ..model.model import Model

    config = {"num_hidden_layers": n_layers, "hidden_size": 64, "num_attention_heads": 1,
              "sliding_window": 2, "sliding_window_pattern": pattern}
    return Model.from_hf_config(config, name="pattern").layer_counts().get(kind, 0)


def _requests_ratio(model: str, requests: int, tokens: int, other_requests: int,
                    other_tokens: int, dtype: str = "bf16") -> float:
    """KV of ``requests`` sequences of ``tokens`` ÷ KV of ``other_requests`` of ``other_tokens``."""
    m = load_model(model)
    return (requests * m.kv_bytes(tokens, dtype)) / (other_requests * m.kv_bytes(other_tokens, dtype))


#: Most requests a claim may simulate (the book's largest run is 20,000): a forked claim
#: cannot make ``kvlib recheck`` run for hours.
MAX_SIM_REQUESTS = 100_000


def _sim(quantity: str, **inputs: Any) -> float:
    """One quantity of a simulated serving run (``kvlib.engines.paging.simulated``; shares as fractions)."""
    from ..engines.paging import simulated

    integer("n_requests", inputs.get("n_requests", 10_000), minimum=1, maximum=MAX_SIM_REQUESTS)
    return simulated(quantity, **inputs)


def _serving_advice(question: str, **inputs: Any) -> float:
    """The article's serving advice by simulation (``kvlib.serve.advice``): ``"budget"`` → the
    token budget its goal favours (tokens), ``"preemptions"`` → preemptions once the pool grows."""
    from ..serve import advice

    integer("n_requests", inputs.get("n_requests", 0), minimum=1, maximum=MAX_SIM_REQUESTS)
    if question == "budget":
        return advice.serving_budget(**inputs)
    if question == "preemptions":
        return advice.preemptions_with_pool(**inputs)
    raise ValueError(f"unknown serving question {question!r}; one of budget, preemptions")


def _engine_block_size(engine: str, version: str = "current") -> int:
    """An engine's default KV block size in tokens (``data/engine_block_sizes.csv``)."""
    from ..engines.paging import engine_block_size

    return engine_block_size(engine, version)


def _pool(model: str, gpu: str, n_gpus: int = 1, gpu_memory_utilization: float = 0.9,
          weight_dtype: Any = "bf16", kv_dtype: str = "bf16", max_num_batched_tokens: int = 8192,
          max_num_seqs: int | None = None, overheads: str = "vllm") -> Any:
    """``kvlib.engines.capacity.kv_pool`` with ``overheads`` "vllm" (calibrated) or "none"."""
    from ..deployment import Deployment
    from ..engines.capacity import NO_OVERHEADS, VLLM, kv_pool

    table = {"vllm": VLLM, "none": NO_OVERHEADS}
    if overheads not in table:
        raise ValueError(f"overheads must be one of {sorted(table)}, got {overheads!r}")
    d = Deployment(model, gpu, tp=n_gpus, weights=weight_dtype, kv=kv_dtype,
                   gpu_memory_utilization=gpu_memory_utilization,
                   max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs)
    return kv_pool(d, overheads=table[overheads])


def _pool_tokens(**inputs: Any) -> int:
    """KV tokens of the pool (vLLM's "GPU KV cache size")."""
    return _pool(**inputs).tokens


def _pool_kv_bytes(per: str = "gpu", **inputs: Any) -> int:
    """Bytes of the KV pool on one GPU (``per="gpu"``) or on all of them (``"total"``)."""
    pool = _pool(**inputs)
    if per not in ("gpu", "total"):
        raise ValueError(f"per must be 'gpu' or 'total', got {per!r}")
    return pool.kv_bytes_per_gpu * (pool.n_gpus if per == "total" else 1)


def _max_concurrency(context_tokens: int, **inputs: Any) -> float:
    """Requests of ``context_tokens`` the pool holds at once (vLLM's "Maximum concurrency")."""
    return _pool(**inputs).max_concurrency(context_tokens)


def _model_weight_bytes(model: str, weight_dtype: Any = "bf16", tp: int = 1) -> int:
    """Weight bytes per GPU from the registry config's parameter count (``kvlib.model.params``)."""
    from ..model.params import weight_bytes
    from ..model.weights import params_for

    return weight_bytes(params_for(model), weight_dtype, tp)


def _critical_batch(gpu: str, weight_dtype: str = "bf16") -> float:
    """Peak FLOP/s ÷ bandwidth × bytes per weight ÷ 2 (``kvlib.speed.roofline.critical_batch``)."""
    from ..speed.roofline import critical_batch

    return critical_batch(gpu, weight_dtype)


def _decode_speedup(model: str, gpu: str, batch_from: int, batch_to: int, context_tokens: int,
                    n_gpus: int = 1, weight_dtype: str = "bf16", kv_dtype: str = "bf16",
                    efficiency: str = "calibrated") -> float:
    """Decode tokens/s at ``batch_to`` ÷ at ``batch_from`` (``kvlib.speed.roofline.decode_step``)."""
    from ..deployment import Deployment
    from ..speed.roofline import CALIBRATED, DATASHEET, decode_step

    table = {"calibrated": CALIBRATED, "datasheet": DATASHEET}
    if efficiency not in table:
        raise ValueError(f"efficiency must be one of {sorted(table)}, got {efficiency!r}")
    d = Deployment(model, gpu, tp=n_gpus, weights=weight_dtype, kv=kv_dtype,
                   efficiency=table[efficiency])
    rates = [decode_step(d, batch=b, context_tokens=context_tokens).tokens_per_s
             for b in (batch_from, batch_to)]
    return rates[1] / rates[0]


def _prefix_trace_stat(stat: str, trace: str = "mooncake_conversation") -> float:
    """A statistic of a stored trace (``data/traces``): ``requests``, ``mean_input_tokens``,
    ``mean_output_tokens`` or ``hit_rate`` (vLLM semantics, unbounded cache; a fraction)."""
    from ..engines.prefix import mooncake_conversation, replay_prefix_cache

    traces = {"mooncake_conversation": mooncake_conversation}
    if trace not in traces:
        raise ValueError(f"unknown trace {trace!r}; one of {sorted(traces)}")
    t = traces[trace]()
    stats = {"requests": lambda: len(t), "mean_input_tokens": lambda: t.input_tokens.mean(),
             "mean_output_tokens": lambda: t.output_tokens.mean(),  # type: ignore[union-attr]
             "hit_rate": lambda: replay_prefix_cache(t, block_size=t.block_size).hit_rate}
    if stat not in stats:
        raise ValueError(f"unknown trace statistic {stat!r}; one of {sorted(stats)}")
    return float(stats[stat]())


def _prefix_hit_tokens(hash_ids: list, input_tokens: list, block_size: int,
                       engine: str = "vllm") -> float:
    """Tokens the last of these trace requests hits, replayed in order (``kvlib.engines.prefix``)."""
    from ..engines.prefix import BlockTrace, replay_prefix_cache

    trace = BlockTrace.from_lists(hash_ids, input_tokens, block_size)
    return float(replay_prefix_cache(trace, engine=engine, block_size=block_size).hit_tokens[-1])


def _cached_discount(provider: str, model: str) -> float:
    """1 − cached-input price ÷ input price (``data/cached_input_prices.csv``; a fraction)."""
    from ..serve.prefix_cost import cached_share

    return 1 - cached_share(provider, model)


#: Computation name → function of the claim's inputs. Byte-valued ones return bytes, fractions
#: are fractions (a claim in % is compared ×100), everything else is in the claim's unit.
COMPUTATIONS: dict[str, Callable[..., float]] = {
    "kv_bits_saving": _kv_bits_saving,
    "gqa_saving": _gqa_saving,
    "mla_elements_per_layer": _mla_elements_per_layer,
    "pattern_layers": _pattern_layers,
    "requests_ratio": _requests_ratio,
    "kv_per_token": _kv_per_token,
    "kv_bytes": _kv_bytes,
    "kv_ratio": _kv_ratio,
    "kv_formula": _kv_formula,
    "kv_saving": _kv_saving,
    "kv_tokens": _kv_tokens,
    "weight_bytes": _weight_bytes,
    "ratio": _ratio,
    "change": _change,
    "usd_per_million_tokens": _usd_per_million_tokens,
    "quoted": _quoted,
    "arithmetic": _arithmetic,
    "sim": _sim,
    "serving_advice": _serving_advice,
    "engine_block_size": _engine_block_size,
    "pool_tokens": _pool_tokens,
    "pool_kv_bytes": _pool_kv_bytes,
    "max_concurrency": _max_concurrency,
    "model_weight_bytes": _model_weight_bytes,
    "critical_batch": _critical_batch,
    "decode_speedup": _decode_speedup,
    "prefix_trace_stat": _prefix_trace_stat,
    "prefix_hit_tokens": _prefix_hit_tokens,
    "cached_discount": _cached_discount,
}

#: Computations that only re-read the claim's own source, and what each re-reads: a claim that
#: agrees with one of them is ``quoted`` (restated faithfully), not ``holds`` (recomputed).
QUOTING = {"quoted": "{where}", "engine_block_size": "the engine's documented default",
           "cached_discount": "the vendor's own price list"}


# --- judging -------------------------------------------------------------------------------------

def precision(claimed: str) -> float:
    """Half a unit of the last digit the claim states: '68.6' → 0.05, '40' → 0.5."""
    try:
        exponent = Decimal(str(claimed).replace(",", "").strip()).as_tuple().exponent
    except InvalidOperation:
        raise ValueError(f"claimed value {claimed!r} is not a number") from None
    if not isinstance(exponent, int):
        raise ValueError(f"claimed value {claimed!r} is not a finite number")
    return 0.5 * 10.0 ** exponent


@dataclass(frozen=True)
class Verdict:
    """A recheck: the value recomputed in the claim's unit, the verdict and why.

    ``auto_verdict`` is what the arithmetic alone says (it differs from ``verdict`` when the
    claim's row records a judgement); ``alternative`` names the reading that matched a slip.
    """

    claimed: float
    recomputed: float
    unit: str
    verdict: str
    reason: str
    auto_verdict: str = ""
    alternative: str = ""


def unit_scale(unit: str) -> float:
    """Raw units (bytes, fraction, ...) per one ``unit``: 'GiB' → 2³⁰, '%' → 0.01, 'x' → 1."""
    return BYTE_UNITS.get(unit) or SCALED_UNITS.get(unit, 1.0)


def _in_unit(value: float, unit: str) -> float:
    return value / unit_scale(unit)


def _fmt(x: float, significant: int = 4) -> str:
    """A number for a reason line: ``significant`` digits, thousands separators, no exponent."""
    return number_text(x, f"{{:,.{significant}g}}")


def _amount(x: float, unit: str, significant: int = 4) -> str:
    """``x`` and its unit for a reason line, a plural unit made singular for 1: '1 token'."""
    if unit in ("x", "%"):  # a ratio: "5.76×"; a share: "3.111%"
        return f"{_fmt(x, significant)}{'×' if unit == 'x' else '%'}"
    singular = abs(x) == 1 and unit.endswith("s") and unit.isalpha() and len(unit) > 2
    return f"{_fmt(x, significant)} {unit[:-1] if singular else unit}"


def judge(claimed: str, recomputed_raw: float, unit: str, tolerance: float | None = None,
          alternatives: Mapping[str, float | tuple[float, str]] | None = None) -> Verdict:
    """Compare a claim with kvlib's raw result (bytes for byte units, a fraction for %).

    ``holds`` within the claim's precision (``tolerance``, default half a unit of its last
    digit); ``rounding`` within twice that or 1%; ``unit slip`` when the number is right in
    the unit a writer confuses (KiB↔KB, GiB↔GB) or under one of the ``alternatives`` readings
    (label → raw value, e.g. the total over all GPUs, or label → (raw value, verdict) for a
    reading that earns another verdict, e.g. a condition the claim drops); otherwise ``wrong``.
    """
    half_digit = precision(claimed)  # raises ValueError naming a claim that is not a number
    value = float(str(claimed).replace(",", "").strip())
    tol = half_digit if tolerance is None else float(tolerance)
    readings = {label: r if isinstance(r, tuple) else (r, "unit slip")
                for label, r in (alternatives or {}).items()}
    for label, (_, kind) in readings.items():
        if kind not in VERDICTS:
            raise ValueError(f"alternative {label!r}: verdict {kind!r} is not one of {VERDICTS}")
    if not tol >= 0:
        raise ValueError(f"tolerance must be >= 0, got {tolerance}")
    ours = _in_unit(recomputed_raw, unit)
    if not math.isfinite(ours):
        raise ValueError(f"recomputed value is not finite: {ours}")

    def close(x: float, band: float) -> bool:
        return abs(x - value) <= band * (1 + 1e-9)

    slip = UNIT_SLIPS.get(unit)
    if close(ours, tol):
        exact_in_slip = (slip is not None and ours != value
                         and math.isclose(_in_unit(recomputed_raw, slip), value))
        note = (f" (exactly {_fmt(value, 6)} {slip}: the source computed in {slip})"
                if exact_in_slip else "")
        if close(ours, half_digit):
            how = "exactly the claim" if ours == value else "which rounds to the claim"
        else:  # inside only the wider tolerance the claim's row states ("about", "~0")
            band = _amount(tol, "points") if unit == "%" else _amount(tol, unit)
            how = f"within ±{band} of the claim, its stated tolerance"
        return Verdict(value, ours, unit, "holds", f"{_amount(ours, unit)}, {how}{note}", "holds")
    if close(ours, 2 * tol) or close(ours, 0.01 * abs(value)):
        if close(ours, 0.01 * abs(value)) and not close(ours, 2 * tol):
            how = "within 1% of the claim"
        elif tolerance is None:
            how = "within one unit of the claim's last digit"
        else:
            band = _amount(2 * tol, "points") if unit == "%" else _amount(2 * tol, unit)
            how = f"within ±{band} of the claim, twice its stated tolerance"
        return Verdict(value, ours, unit, "rounding", f"{_amount(ours, unit)}: {how}",
                       "rounding")
    if slip is not None and close(_in_unit(recomputed_raw, slip), 2 * tol):
        return Verdict(value, ours, unit, "unit slip",
                       f"{_amount(ours, unit)}; the claim's number is the value in {slip}",
                       "unit slip", slip)
    for label, (raw, kind) in readings.items():
        alt = _in_unit(raw, unit)
        if close(alt, 2 * tol) or close(alt, 0.01 * abs(value)):
            only = "" if kind == "unit slip" else "only "
            return Verdict(value, ours, unit, kind,
                           f"{_amount(ours, unit)} as stated; {_amount(alt, unit)} {only}{label}",
                           kind, label)
    return Verdict(value, ours, unit, "wrong",
                   f"recomputed {_amount(ours, unit)}, not {_fmt(value, 6)}", "wrong")


def _as_quoted(name: str, inputs: Mapping[str, Any], verdict: Verdict) -> Verdict:
    """A ``holds`` from a computation that re-reads the source (``QUOTING``) becomes ``quoted``."""
    if name not in QUOTING or verdict.verdict != "holds":
        return verdict
    source = QUOTING[name].format(where=inputs.get("where", "the source"))
    return Verdict(verdict.claimed, verdict.recomputed, verdict.unit, "quoted",
                   f"restated from {source}; not recomputed", verdict.auto_verdict,
                   verdict.alternative)


# --- claims files --------------------------------------------------------------------------------

def claims_dir() -> Path:
    """``data/claims`` (``$KVLIB_DATA/claims`` when set)."""
    return data_dir() / "claims"


def _read_claims(directory: Path) -> tuple[pd.DataFrame, list[dict[str, str]]]:
    """Every CSV in ``directory``; files that cannot be read come back as problem rows."""
    frames, problems = [], []
    for path in sorted(directory.glob("*.csv")):
        try:
            frame = pd.read_csv(path, dtype=str, keep_default_na=False)
        except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
            problems.append({"id": path.name, "file": path.name,
                             "reason": f"{path.name} is not a readable CSV: {exc}".splitlines()[0]})
            continue
        missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
        if missing:
            problems.append({"id": path.name, "file": path.name,
                             "reason": f"{path.name} lacks column(s) {', '.join(missing)}"})
            continue
        frames.append(frame.assign(file=path.name))
    columns = [*REQUIRED_COLUMNS, *OPTIONAL_COLUMNS, "file"]
    claims = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)
    for column in columns:
        if column not in claims.columns:
            claims[column] = ""
    return claims.fillna("").astype(str), problems


def load_claims(directory: Path | str | None = None, strict: bool = True) -> pd.DataFrame:
    """Every ``data/claims/*.csv`` as one DataFrame (one claim per row, ``id`` as index).

    Missing optional columns are empty strings; ``file`` names the CSV a row came from. With
    ``strict`` (the default) raises ValueError when two rows share an id or a file cannot be read.
    """
    claims, problems = _read_claims(Path(directory) if directory else claims_dir())
    if strict:
        if problems:
            raise ValueError("; ".join(p["reason"] for p in problems))
        dup = claims["id"][claims["id"].duplicated()].tolist()
        if dup:
            raise ValueError(f"duplicate claim ids in data/claims: {dup}")
    return claims.set_index("id")


def _json_object(text: str, column: str) -> dict[str, Any]:
    if not str(text).strip():
        return {}
    value = load_json(str(text), column)
    if not isinstance(value, dict):
        raise ValueError(f"{column} must be a JSON object, got {type(value).__name__}")
    return value


def _compute(name: str, inputs: Mapping[str, Any]) -> float:
    if name not in COMPUTATIONS:
        raise KeyError(f"unknown computation {name!r}; known: {', '.join(sorted(COMPUTATIONS))}")
    try:
        return COMPUTATIONS[name](**inputs)
    except (TypeError, ArithmeticError) as exc:  # a missing or unexpected input, an overflow
        raise ValueError(f"{name}: {exc}") from None


def _optional_float(row: Mapping[str, Any], column: str) -> float | None:
    text = str(row.get(column, "") or "").strip()
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{column} {text!r} is not a number") from None


def _alternatives(row: Mapping[str, Any], inputs: Mapping[str, Any],
                  raw: float) -> dict[str, float | tuple[float, str]]:
    name = row["computation"]
    alts: dict[str, float | tuple[float, str]] = {}
    for label, over in _json_object(row.get("alt_inputs", ""), "alt_inputs").items():
        over = _json_object(json.dumps(over), f"alt_inputs[{label!r}]")
        kind = str(over.pop("_verdict", "unit slip"))
        alts[str(label)] = (_compute(name, {**inputs, **over}), kind)
    n = _optional_float(row, "per_gpu_factor")
    if n is not None:
        if n <= 0:
            raise ValueError(f"per_gpu_factor must be positive, got {n:g}")
        alts[f"as the total over {n:g} GPUs"] = raw * n
        alts[f"per GPU (of {n:g})"] = raw / n
    return alts


def _override(row: Mapping[str, Any], verdict: Verdict) -> Verdict:
    chosen = str(row.get("verdict_override", "") or "").strip()
    why = str(row.get("override_reason", "") or "").strip()
    if not chosen:
        return verdict
    if chosen not in VERDICTS:
        raise ValueError(f"verdict_override {chosen!r} is not one of {', '.join(VERDICTS)}")
    if not why:
        raise ValueError(f"verdict_override {chosen!r} needs an override_reason")
    return Verdict(verdict.claimed, verdict.recomputed, verdict.unit, chosen, why,
                   verdict.auto_verdict, verdict.alternative)


def _claimed_number(claimed: str) -> float:
    try:
        return float(str(claimed).replace(",", "").strip())
    except ValueError:
        return math.nan


def recheck(claim: str | Mapping[str, Any], claims: pd.DataFrame | None = None) -> Verdict:
    """Recheck one claim: an id from ``data/claims/`` (or ``claims``) or a row with its fields.

    Raises KeyError for an unknown id or computation, ValueError for bad inputs, JSON or a
    formula outside ``FORMULA_LIMITS``; one line that names the claim (``claim a12: ...``).
    """
    if isinstance(claim, str):
        table = load_claims() if claims is None else claims
        if claim not in table.index:
            raise KeyError(f"no claim {claim!r} in data/claims")
        row: Mapping[str, Any] = table.loc[claim]
        claim_id = claim
    else:
        row = claim
        claim_id = str(row.get("id", "") or "(no id)")
    try:
        return _recheck_row(row)
    except KeyError as exc:
        raise KeyError(f"claim {claim_id}: {exc.args[0] if exc.args else exc}") from None
    except (ValueError, ArithmeticError) as exc:
        raise ValueError(" ".join(f"claim {claim_id}: {exc}".split())) from None


def _recheck_row(row: Mapping[str, Any]) -> Verdict:
    """``recheck`` of one row; errors do not name the claim (the callers do)."""
    name = str(row["computation"]).strip()
    unit = str(row["unit"])
    expected = str(row.get("expected_verdict", "") or "").strip()
    if expected and expected not in VERDICTS:
        raise ValueError(f"expected_verdict {expected!r} is not one of {', '.join(VERDICTS)}")
    if name == UNVERIFIABLE:
        why = (str(row.get("override_reason", "") or "").strip()
               or "no primary source or inputs to recompute it from")
        return Verdict(_claimed_number(row["claimed"]), math.nan, unit, "unverifiable", why,
                       "unverifiable")
    inputs = _json_object(row["inputs"], "inputs")
    raw = _compute(name, inputs)
    verdict = judge(row["claimed"], raw, unit, _optional_float(row, "tolerance"),
                    _alternatives(row, inputs, raw))
    if name == "serving_advice" and verdict.verdict == "holds":  # a choice, not a measurement
        verdict = replace(verdict, reason=f"the simulated runs give {_amount(raw, unit)}, the "
                          "claim's answer")
    return _override(row, _as_quoted(name, inputs, verdict))


#: Columns of ``recheck_all()``, in order.
RESULT_COLUMNS = ("id", "claim", "source", "claimed", "recomputed", "unit", "verdict", "reason",
                  "auto_verdict", "alternative", "expected_verdict", "section", "quantity",
                  "computation", "file", "source_url", "cite", "notes")


def recheck_all(claims: pd.DataFrame | None = None,
                directory: Path | str | None = None) -> pd.DataFrame:
    """Every claim rechecked: one row each with ``RESULT_COLUMNS``, never raising for a bad row.

    A row that cannot be evaluated (unknown computation, missing input, unparseable JSON or
    number, duplicate id, unreadable file) gets verdict ``"error"`` and the problem as reason.
    ``claimed``/``recomputed`` are floats in the claim's unit (NaN where there is none).
    """
    problems: list[dict[str, str]] = []
    if claims is None:
        table, problems = _read_claims(Path(directory) if directory else claims_dir())
    else:
        table = claims.reset_index() if "id" not in claims.columns else claims.copy()
    duplicated = set(table["id"][table["id"].duplicated(keep=False)])
    out = []
    for _, row in table.iterrows():
        record = {c: row.get(c, "") for c in RESULT_COLUMNS}
        try:
            if row["id"] in duplicated:
                raise ValueError(f"id {row['id']!r} is used by more than one row")
            v = _recheck_row(row)
            record.update(claimed=v.claimed, recomputed=v.recomputed, verdict=v.verdict,
                          reason=v.reason, auto_verdict=v.auto_verdict, alternative=v.alternative)
        except (KeyError, ValueError, ZeroDivisionError, OverflowError) as exc:
            message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
            record.update(claimed=_claimed_number(row["claimed"]), recomputed=math.nan,
                          verdict=ERROR, reason=f"row {row['id']}: {message}", auto_verdict=ERROR,
                          alternative="")
        out.append(record)
    for problem in problems:
        out.append({**{c: "" for c in RESULT_COLUMNS}, **problem, "claimed": math.nan,
                    "recomputed": math.nan, "verdict": ERROR, "auto_verdict": ERROR})
    result = pd.DataFrame(out, columns=list(RESULT_COLUMNS))
    result["claimed"] = result["claimed"].astype(float)
    result["recomputed"] = result["recomputed"].astype(float)
    return result


def unexpected(results: pd.DataFrame, require: bool = False) -> pd.DataFrame:
    """The rows of ``recheck_all()`` whose verdict is not their ``expected_verdict`` (columns
    id, claim, expected_verdict, verdict, reason); with ``require``, rows that have no expected
    verdict too. Empty when the data and the prose agree."""
    expected = results["expected_verdict"].fillna("").astype(str).str.strip()
    wrong = (expected != "") & (results["verdict"] != expected)
    if require:
        wrong |= expected == ""
    return results.loc[wrong, ["id", "claim", "expected_verdict", "verdict", "reason"]]


#: The columns a chapter shows of its rechecked claims, in order.
CLAIM_VIEW = ("claim", "claimed", "unit", "recomputed", "verdict", "reason")


def claims_table(results: pd.DataFrame, ids: list[str] | None = None,
                 columns: tuple[str, ...] = CLAIM_VIEW, recomputed: str = "{:,.4g}") -> Table:
    """The rows ``ids`` of ``recheck_all()`` (default: every row, in order) as a reader's table:
    the claim id first, then ``columns``; the claimed figure as published (up to six significant
    digits) and the recomputed one with the format ``recomputed``. KeyError for an unknown id."""
    by_id = results.set_index("id") if "id" in results.columns else results
    missing = [i for i in ids or [] if i not in by_id.index]
    if missing:
        raise KeyError(f"claims not in the results: {missing}")
    shown = by_id.loc[list(ids) if ids is not None else by_id.index, list(columns)]
    return table(shown.rename_axis("id"), {"claimed": "{:,.6g}", "recomputed": recomputed},
                 hide_index=False)


def verdict_counts(results: pd.DataFrame) -> dict[str, int]:
    """Rows per verdict, in ``VERDICTS`` order then ``error``; zero counts included."""
    counts = results["verdict"].value_counts()
    return {v: int(counts.get(v, 0)) for v in (*VERDICTS, ERROR)}
