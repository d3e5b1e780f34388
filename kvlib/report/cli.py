"""The ``kvlib`` command: KV bytes, what fits on a GPU, $/1M tokens, and claim rechecks.

``fit`` and ``cost`` of a model also print the command that starts the engine as they assume
(``launch``; ``"launch_command"`` in JSON, ``kvlib.launch_command``); ``--engine`` picks vLLM,
SGLang or TensorRT-LLM, whose pool, limits, step cost and command the answers then use.

Readable tables by default, ``--json`` for scripts. Exit status: 0 with the answer on stdout;
2 with one line on stderr for bad input (an unknown model, a negative size, a context past the
model's maximum, a result no float can hold, ...). Closing the output early (``| head``) is
not an error.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

EXAMPLES = """examples:
  kvlib kv llama-3.1-8b --tokens 131072 --dtype fp8
  kvlib kv ./config.json --tokens 8192
  kvlib fit llama-3.1-8b h100-sxm --util 0.9 --context 8192
  kvlib fit llama-3.1-8b h100-sxm --engine sglang --context 8192
  kvlib fit llama-3.1-8b a100-80gb --engine-version 0.19.0 --context 8192
  kvlib fit llama-3.1-70b h100-sxm --tp 4 --context 8192 --json
  kvlib fit deepseek-v3 h200 --tp 1 --dp 8 --ep 8 --weight-dtype fp8 --context 8192
  kvlib cost --price 2.90 --tps 1000
  kvlib cost llama-3.1-8b h100-sxm --price 2.90 --context 8192
  kvlib cost llama-3.1-8b h100-sxm --price 2.90 --engine sglang
  kvlib slo llama-3.1-70b h100-sxm --tp 2 --weight-dtype fp8 --kv-dtype fp8 --ttft 2 --tpot 0.05
  kvlib recheck a07 a12
  kvlib models
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        raise _UsageError(message)


class _UsageError(Exception):
    pass


def _integer(minimum: int) -> Callable[[str], int]:
    """An argparse type: a whole number ≥ ``minimum`` (argparse names the flag in the error)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be ≥ {minimum}, got {value}")
        return value
    return parse


def _real(within: Callable[[float], bool], words: str) -> Callable[[str], float]:
    """An argparse type: a finite number for which ``within`` holds, ``words`` saying where
    (argparse names the flag in the error)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not (math.isfinite(value) and within(value)):
            raise argparse.ArgumentTypeError(f"must be a number {words}, got {text}")
        return value
    return parse


_POSITIVE = _real(lambda v: v > 0, "> 0")


def _plural(count: str, noun: str) -> str:
    """``count`` as printed and ``noun``, plural unless the count is 1."""
    return f"{count} {noun}{'' if count == '1' else 's'}"


def _version() -> str:
    try:
        return metadata.version("kvlib")
    except metadata.PackageNotFoundError:
        return "unknown (not installed: pip install -e .)"


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:  # e.g. a name longer than the file system allows: not a file
        return False


def _load(model: str):
    """A registry slug, or a path to a config.json (plain, or a registry record)."""
    from ..core.data import load_json
    from ..model.model import Model
    from ..model.registry import load_model

    path = Path(model)
    if path.suffix == ".json" or _is_file(path):
        if not _is_file(path):
            raise ValueError(f"no such config file: {model}")
        try:
            data = load_json(path.read_text(encoding="utf-8"), model)
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"cannot read {model}: {exc}") from None
        config = data.get("config", data) if isinstance(data, dict) else data
        return Model.from_hf_config(config, name=path.stem)
    return load_model(model)


def _fixed(n_bytes: int, unit: int, places: int) -> str:
    """``n_bytes / unit`` with ``places`` decimals and thousands separators, in exact integer
    arithmetic (half rounds to even), so no byte count is too large to print."""
    scale = 10 ** places
    q, r = divmod(n_bytes * scale, unit)
    if 2 * r > unit or (2 * r == unit and q % 2):
        q += 1
    whole, frac = divmod(q, scale)
    return f"{whole:,}.{frac:0{places}d}" if places else f"{whole:,}"


def _table(rows: Sequence[tuple[str, Any]]) -> str:
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def _kv(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    from ..core.units import GIB, KIB

    m = _load(args.model)
    per_token = m.kv_bytes_per_token(args.dtype, tp=args.tp)
    total = m.kv_bytes(args.tokens, args.dtype, tp=args.tp)
    data = {"model": m.name, "attention": m.attention, "layers": m.n_layers,
            "layer_kinds": m.layer_counts(), "dtype": args.dtype, "tp": args.tp,
            "kv_bytes_per_token": per_token, "tokens": args.tokens, "kv_bytes": total,
            "state_bytes": m.state_bytes(tp=args.tp) if m.dtype else None}
    text = _table([
        ("model", f"{m.name} ({m.attention}, {m.n_layers} layers)"),
        ("kv per token", f"{per_token:,} bytes = {_fixed(per_token, KIB, 2)} KiB "
                         f"({args.dtype}, per GPU at tp={args.tp})"),
        (f"kv for {args.tokens:,} tokens", f"{total:,} bytes = {_fixed(total, GIB, 3)} GiB"),
        *_window_rows(m, per_token, total, args.tokens),
    ])
    return data, text


def _window_rows(m: Any, per_token: int, total: int, tokens: int) -> list[tuple[str, str]]:
    """Why a sequence holds less than per-token × tokens: its windowed layers keep only their
    last window of tokens (none when it holds exactly that)."""
    windows = [(n, layer.window) for layer, n in m.distinct_layers
               if getattr(layer, "window", None) and layer.window < tokens]
    if total >= per_token * tokens or not windows:
        return []
    kept = "; ".join(f"{n} layers keep only their last {w:,} tokens" for n, w in windows)
    return [("windows", f"{kept}, so {tokens:,} tokens hold {total / tokens:,.0f} bytes a "
                        f"token, not {per_token:,}")]


def _deployment(args: argparse.Namespace):
    """The ``Deployment`` a ``fit`` or ``cost`` command describes: its model, GPU, degree,
    formats, utilization, context (``max_model_len``) and engine limits."""
    from ..deployment import ENGINE_NAMES, Deployment

    model = _load(args.model)
    if not _is_file(Path(args.model)) and Path(args.model).suffix != ".json":
        model = args.model  # a registry slug: the deployment knows its checkpoints
    parallel = {k: getattr(args, k, None) or 1 for k in ("pp", "dp", "ep")}
    if args.engine != "vllm" and set(parallel.values()) != {1}:
        given = ", ".join(f"--{k} {v}" for k, v in parallel.items() if v != 1)
        raise ValueError(f"{given}: kvlib models the {ENGINE_NAMES[args.engine]} pool as one "
                         "tensor-parallel group only; pipeline, data-parallel and "
                         "expert-parallel layouts are modelled for --engine vllm")
    d = Deployment(model, args.gpu, tp=args.tp, **parallel, weights=args.weight_dtype,
                   kv=args.kv_dtype, engine=args.engine, gpu_memory_utilization=args.util,
                   engine_version=_engine_version(args),
                   max_model_len=args.context,
                   max_num_seqs=args.max_num_seqs,
                   max_num_batched_tokens=args.max_num_batched_tokens,
                   allow_long_max_model_len=getattr(args, "allow_long_context", False))
    limits = d.resolved()
    if d.engine == "vllm" and limits.max_num_batched_tokens < limits.max_num_seqs:
        # no figures for a server that does not start (vllm/config/scheduler.py)
        raise ValueError(f"--max-num-batched-tokens {limits.max_num_batched_tokens:,} is below "
                         f"--max-num-seqs {limits.max_num_seqs:,}: vLLM refuses to start; give "
                         f"--max-num-seqs {limits.max_num_batched_tokens} or less")
    return d


def _engine_version(args: argparse.Namespace) -> str | None:
    """The vLLM release ``--engine-version`` names (None: the pinned ``VLLM_VERSION``);
    ValueError for another engine, whose pool the book models at one release only."""
    version = getattr(args, "engine_version", None)
    if version is not None and args.engine != "vllm":
        from ..deployment import ENGINE_VERSIONS

        raise ValueError(f"--engine-version applies to vLLM only: the book models {args.engine} "
                         f"{ENGINE_VERSIONS[args.engine]} alone")
    return version


def _engine_release(d: Any) -> str | None:
    """The release whose rules size ``d``'s pool: the vLLM one it names or the pinned one,
    SGLang's modelled release; None for TensorRT-LLM (the book pins a commit, not a release)."""
    from ..deployment import ENGINE_VERSIONS

    if d.engine == "vllm":
        return d.engine_version or ENGINE_VERSIONS["vllm"]
    return ENGINE_VERSIONS[d.engine] if d.engine == "sglang" else None


def _engine_words(d: Any) -> str:
    """The engine and release in words: "vLLM 0.19.0", "SGLang 0.5.23", "TensorRT-LLM"."""
    from ..deployment import ENGINE_NAMES

    return " ".join(filter(None, (ENGINE_NAMES[d.engine], _engine_release(d))))


#: Flags of ``fit`` and ``cost`` that describe a deployment, their attribute and default.
#: They are parsed as None, so a flag ``cost --tps`` cannot use is refused, not dropped.
_MODEL_FLAGS = {"--util": "util", "--context": "context", "--output-tokens": "output_tokens",
                "--tp": "tp", "--weight-dtype": "weight_dtype", "--kv-dtype": "kv_dtype",
                "--max-num-seqs": "max_num_seqs",
                "--max-num-batched-tokens": "max_num_batched_tokens",
                "--pp": "pp", "--dp": "dp", "--ep": "ep", "--engine-version": "engine_version"}
_DEFAULTS = {"context": 8192, "tp": 1, "kv_dtype": "bf16"}


def _with_defaults(args: argparse.Namespace) -> argparse.Namespace:
    """``args`` with the defaults of the deployment flags the user did not give."""
    for dest, default in _DEFAULTS.items():
        if getattr(args, dest) is None:
            setattr(args, dest, default)
    return args


def _launch(deployment: Any, fits: bool = True) -> tuple[str | None, list[str]]:
    """The command that starts the engine as ``deployment`` describes it
    (``kvlib.launch_command``) and its notes; None and the reason where there is none (the
    deployment does not fit, no checkpoint in its weight format is recorded, the engine has no
    flag for its KV format)."""
    from ..engines.launch import launch_command

    if not fits:
        return None, ["the deployment does not fit, so no command starts it"]
    try:
        command = launch_command(deployment)
    except ValueError as exc:
        return None, [" ".join(str(exc).split())]
    return command.text, list(command.notes)


def _launch_row(text: str | None, notes: list[str]) -> tuple[str, str]:
    return ("launch", text if text is not None else f"none: {notes[0]}")


def _memory_fraction(pool: Any) -> float:
    """The share of memory the engine was started with: vLLM's gpu_memory_utilization,
    SGLang's mem_fraction_static, TensorRT-LLM's free_gpu_memory_fraction."""
    for name in ("gpu_memory_utilization", "mem_fraction_static", "free_gpu_memory_fraction"):
        if hasattr(pool, name):
            return float(getattr(pool, name))
    raise TypeError(f"unknown pool {type(pool).__name__}")


def _fit(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    from ..engines.capacity import NoKVMemory
    from ..engines.pools import kv_pool
    from ..core.units import GIB

    d = _deployment(_with_defaults(args))
    m, context = d.model, d.max_model_len
    try:
        pool, refused = kv_pool(d), None
    except NoKVMemory as exc:  # the engine would not start: report it as "does not fit"
        pool, refused = exc.pool, exc
    conc = pool.max_concurrency(context)
    fraction = _memory_fraction(pool)
    engine = _engine_words(d)
    data = {"model": m.name, "gpu": args.gpu, "n_gpus": args.tp, "engine": d.engine,
            "engine_version": _engine_release(d), "gpu_memory_utilization": fraction, "weight_dtype": d.weights.text,
            "kv_dtype": args.kv_dtype, "kv_bytes_per_gpu": pool.kv_bytes_per_gpu,
            "kv_tokens": pool.tokens, "context_tokens": args.context, "max_concurrency": conc,
            # the engine's memory left for the KV cache, or how far below zero it falls where
            # the engine would not start: neither is negative
            "available_kv_bytes": max(pool.available_kv_bytes, 0),
            "kv_shortfall_bytes": max(-pool.available_kv_bytes, 0), "fits": conc >= 1}
    rows = [
        ("model / gpu", f"{m.name} on {d.gpus} × {args.gpu} ({engine}, "
                        f"memory fraction {fraction:g})"),
        ("kv pool per GPU", f"{pool.kv_bytes_per_gpu:,} bytes = "
                            f"{_fixed(pool.kv_bytes_per_gpu, GIB, 2)} GiB"),
        ("kv tokens", f"{pool.tokens:,}"),
        (f"requests of {args.context:,} tokens",
         f"{conc:,.2f} ({_plural(f'{math.floor(conc):,}', 'whole request')})"),
    ]
    if conc < 1:
        # the memory left is ≤ 0 only where the engine refuses to start (every engine's pool)
        why = (f"no memory left for the KV cache: {refused.terms}" if refused is not None
               else f"weights and start-up overheads leave "
                    f"{_fixed(pool.available_kv_bytes, GIB, 2)} GiB per GPU for the KV cache")
        rows.append(("does not fit", f"{why}; try a larger --tp or smaller --weight-dtype"))
        data["does_not_fit"] = why
    elif _parallel(d):
        rows += _parallel_rows(d, pool, args, data)
    else:
        point = _serving(d, args)
        data["speed"] = _speed_data(point)
        rows += _speed_rows(point)
    data["launch_command"], data["launch_notes"] = _launch(d, fits=conc >= 1)
    rows.append(_launch_row(data["launch_command"], data["launch_notes"]))
    return data, _table(rows)


def _serving(deployment: Any, args: argparse.Namespace):
    """The serving pipeline for the command's deployment and request lengths."""
    from ..serve.serving import serving_point

    if args.output_tokens is None:  # the default (an explicit 0 is refused by its type)
        output = min(1024, args.context // 2)
        if output < 1:
            raise ValueError(f"--context {args.context} leaves no room for a prompt and an "
                             "output token: give --context 2 or more")
    else:
        output = args.output_tokens
    if not 0 < output < args.context:
        raise ValueError(f"--output-tokens must be between 1 and --context − 1, got {output}")
    return serving_point(deployment, input_tokens=args.context - output, output_tokens=output)


def _speed_data(point: Any) -> dict[str, Any]:
    band = point.band
    return {"input_tokens": point.input_tokens, "output_tokens": point.output_tokens,
            "batch": point.batch, "tpot_s": point.tpot_s, "ttft_s": point.ttft_s,
            "tokens_per_s": point.tokens_per_s,
            "per_user_tokens_per_s": point.per_user_tokens_per_s,
            "tokens_per_s_range": list(band.speed_range(point.tokens_per_s)),
            "error_band": {"basis": band.words, "scope": band.scope, "points": band.n,
                           "errors": band.basis, "measured_like_this": band.measured,
                           "median_abs_error": band.median_abs_error, "low": band.low,
                           "high": band.high}}


def _speed_rows(point: Any) -> list[tuple[str, str]]:
    from ..deployment import ENGINE_NAMES

    band = point.band
    lo, hi = band.speed_range(point.tokens_per_s)
    return [
        ("decode batch", f"{point.batch} request{'s' * (point.batch > 1)} of "
                         f"{point.input_tokens:,} + "
                         f"{point.output_tokens:,} tokens ({ENGINE_NAMES[point.engine]}, "
                         "calibrated roofline)"),
        ("speed", f"{point.tokens_per_s:,.0f} tok/s in all, {point.per_user_tokens_per_s:,.1f} "
                  f"tok/s per user, first token after {point.ttft_s:,.2f} s"),
        ("model error", f"{band.words}; 80% within {band.low:+.0%} … {band.high:+.0%} → "
                        f"{lo:,.0f}–{hi:,.0f} tok/s" + _band_side_words(band.low, band.high)),
        *_node_rows(point.n_gpus),
    ]


def _node_rows(tp: int) -> list[tuple[str, str]]:
    """A note where one tensor-parallel group spans more than one node."""
    from .answer import TWO_NODES

    node = TWO_NODES[0]
    if tp <= node:
        return []
    split = (f"; --tp {node} --pp {tp // node} keeps them inside each node" if tp % node == 0
             else "")
    return [("across nodes", f"--tp {tp} spans more than one {node}-GPU node: kvlib times its "
                             "all-reduces with one node's GPU-to-GPU links, which flatters it"
                             + split)]


def _band_side_words(low: float, high: float) -> str:
    """Why the figure may sit outside its own band: nine in ten measured cases like it ran
    slower (or faster) than modelled (``answer.band_side``)."""
    from .answer import band_side

    side = band_side(low, high)
    if not side:
        return ""
    way = "slower" if side == "optimistic" else "faster"
    return (f" ({side}: nine in ten measurements like this ran {way} than modelled, so the "
            "figure lies outside its range)")


def _parallel(d: Any) -> bool:
    return (d.pp, d.dp, d.ep) != (1, 1, 1)


def _parallel_pass(d: Any, pool: Any, args: argparse.Namespace):
    """The decode pass of a deployment beyond one tensor-parallel group
    (``kvlib.speed.parallel.parallel_decode``): each data-parallel rank decodes as many requests
    of the command's context as its pool holds, at most ``max_num_seqs``, at the middle of
    their output."""
    from ..speed.parallel import parallel_decode

    output = args.output_tokens or min(1024, args.context // 2)
    if not 0 < output < args.context:
        raise ValueError(f"--output-tokens must be between 1 and --context − 1, got {output}")
    held = math.floor(pool.max_concurrency(args.context))
    if held < 1:
        raise ValueError(f"{d.model.name} does not fit on {d.gpus} × {d.gpu.slug} with "
                         f"tp={d.tp}, pp={d.pp}, dp={d.dp}, ep={d.ep}")
    batch = min(held, d.resolved().max_num_seqs)
    return parallel_decode(d, batch=batch, context_tokens=args.context - output + output // 2)


def _parallel_rows(d: Any, pool: Any, args: argparse.Namespace,
                   data: dict[str, Any]) -> list[tuple[str, str]]:
    """``fit``'s rows for pipeline stages, data-parallel ranks or expert parallelism; fills
    ``data`` with the same numbers."""
    from ..core.units import GIB

    step = _parallel_pass(d, pool, args)
    everyone = pool.deployment_concurrency(args.context)
    whole = d.dp * math.floor(pool.max_concurrency(args.context))  # each rank holds its own
    data.update(pp=d.pp, dp=d.dp, ep=d.ep, gpus=d.gpus, n_gpus=d.gpus,
                weights_bytes_per_gpu=pool.weights_bytes_per_gpu,
                max_concurrency_per_rank=data["max_concurrency"], max_concurrency=everyone,
                parallel_speed={"batch_per_rank": step.batch, "tpot_s": step.tpot_s,
                                "tokens_per_s": step.tokens_per_s,
                                "expert_exchange_s": step.exchange_s,
                                "stage_sends_s": step.send_s,
                                "bubble_share": step.bubble_share})
    return [
        ("layout", f"{d.gpus} GPUs: tp {d.tp} × pp {d.pp} × dp {d.dp}"
                   + (f", experts over {d.ep} GPUs" if d.ep > 1 else "")
                   + (f" (figures of pipeline stage {pool.stage + 1}, the one with the fewest "
                      "blocks)" if d.pp > 1 else "")),
        ("weights per GPU", f"{_fixed(pool.weights_bytes_per_gpu, GIB, 2)} GiB"),
        ("requests in all", f"{everyone:,.2f} ({_plural(f'{whole:,}', 'whole request')}; "
                            + (f"{d.dp} data-parallel ranks, each with its own pool and requests)"
                               if d.dp > 1 else "one data-parallel rank)")),
        ("decode pass", f"{_plural(str(step.batch), 'request')} per rank: "
                        f"{step.tpot_s * 1e3:,.1f} ms per token "
                        f"(expert exchange {step.exchange_s * 1e3:,.2f} ms, stage sends "
                        f"{step.send_s * 1e3:,.3f} ms, bubble {step.bubble_share:.0%}), "
                        f"{step.tokens_per_s:,.0f} tok/s in all (decode only)"),
        ("model error", "no error band for these settings: the parallel terms are checked on "
                        "few measured points (chapter 4)"),
    ]


def _parallel_cost(d: Any, args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    """``cost`` for pipeline stages, data-parallel ranks or expert parallelism: every GPU of
    the deployment at ``--price`` over the tokens its decode pass emits."""
    from ..engines.pools import kv_pool
    from ..serve.cost import cost_per_million_tokens

    step = _parallel_pass(d, kv_pool(d), args)
    dollars = cost_per_million_tokens(args.price * d.gpus, step.tokens_per_s)
    data = {"model": d.model.name, "gpu": args.gpu, "n_gpus": d.gpus, "tp": d.tp, "pp": d.pp,
            "dp": d.dp, "ep": d.ep, "dollars_per_gpu_hour": args.price,
            "dollars_per_hour": args.price * d.gpus, "batch_per_rank": step.batch,
            "tpot_s": step.tpot_s, "tokens_per_s": step.tokens_per_s,
            "dollars_per_million_tokens": dollars}
    rows = [("model / gpu", f"{d.model.name} on {d.gpus} × {args.gpu} (tp {d.tp} × pp {d.pp} × "
                            f"dp {d.dp}) at ${args.price:,.2f} per GPU-hour"),
            ("decode pass", f"{_plural(str(step.batch), 'request')} per rank, "
                            f"{step.tpot_s * 1e3:,.1f} ms per token, "
                            f"{step.tokens_per_s:,.0f} tok/s in all"),
            ("cost", f"${dollars:,.3f} per 1M output tokens (decode only, no error band for "
                     "these settings)")]
    data["launch_command"], data["launch_notes"] = _launch(d)
    rows.append(_launch_row(data["launch_command"], data["launch_notes"]))
    return data, _table(rows)


def _cost(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    from ..serve.cost import cost_per_million_tokens

    if (args.tps is None) == (args.model is None):
        raise _UsageError("give either --tps or a model and a GPU")
    if args.model is not None:
        if args.gpu is None:
            raise _UsageError("the following arguments are required: gpu")
        return _cost_of(_with_defaults(args))
    given = [flag for flag, dest in _MODEL_FLAGS.items() if getattr(args, dest) is not None]
    if args.allow_long_context:
        given.append("--allow-long-context")
    given += [flag for flag, dest in (("--speculative", "speculative"),
                                      ("--draft-model", "draft_model")) if getattr(args, dest)]
    if given:
        raise _UsageError(f"{', '.join(given)} {'applies' if len(given) == 1 else 'apply'} "
                          "only with a model and a GPU, not with --tps")
    dollars = cost_per_million_tokens(args.price, args.tps)
    data = {"dollars_per_hour": args.price, "tokens_per_second": args.tps,
            "dollars_per_million_tokens": dollars}
    text = _table([("price", f"${args.price:,.2f} per hour"), ("throughput", f"{args.tps:,g} tok/s"),
                   ("cost", f"${dollars:,.2f} per 1M tokens")])
    return data, text


def _cost_of(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    """$/1M tokens of a model on a GPU: speed from the serving pipeline, with its error band."""

    d = _deployment(args)
    if args.draft_model and not args.speculative:
        raise _UsageError("--draft-model applies only with --speculative")
    if _parallel(d):
        if args.speculative:
            raise ValueError("speculative decoding is modelled for one tensor-parallel group "
                             "(no --pp, --dp or --ep)")
        return _parallel_cost(d, args)
    m = d.model
    point = _serving(d, args)
    dollars = point.dollars_per_million(args.price)
    per_input, per_output = point.dollars_per_million_split(args.price)
    lo, hi = point.band.cost_range(dollars)
    data = {"model": m.name, "gpu": args.gpu, "n_gpus": args.tp, "engine": d.engine,
            "dollars_per_gpu_hour": args.price, "dollars_per_hour": args.price * args.tp,
            **_speed_data(point), "dollars_per_million_tokens": dollars,
            "dollars_per_million_tokens_range": [lo, hi],
            "dollars_per_million_input_tokens": per_input,
            "dollars_per_million_output_tokens": per_output}
    rows = [("model / gpu", f"{m.name} on {args.tp} × {args.gpu} ({_engine_words(d)}) at "
                            f"${args.price:,.2f} per GPU-hour"),
            *_speed_rows(point),
            ("cost", f"${dollars:,.3f} per 1M output tokens (held-out range ${lo:,.3f}–${hi:,.3f})"),
            ("split by work", _split_words(point, per_input, per_output))]
    if args.speculative:
        d = _speculative(d, args)
        data["speculative"], spec_rows = _speculative_cost(d, point, args.price * args.tp)
        rows += spec_rows
    data["launch_command"], data["launch_notes"] = _launch(d)
    rows.append(_launch_row(data["launch_command"], data["launch_notes"]))
    return data, _table(rows)


def _split_words(point: Any, per_input: float, per_output: float) -> str:
    """The input and output prices, and how they add up to the cost per output token with the
    case's own input tokens per output token."""
    ratio = point.input_tokens / point.output_tokens
    shown = f"{ratio:,.0f}" if ratio >= 100 else f"{ratio:.3g}"  # 7, 7.17, 0.25, 1,280
    total = ratio * per_input + per_output
    sum_words = (f"{shown} input tokens per output token ({point.input_tokens:,} ÷ "
                 f"{point.output_tokens:,}): {shown} × ${per_input:,.3f} + ${per_output:,.3f} = "
                 f"${total:,.3f}")
    return (f"${per_input:,.3f} per 1M input tokens + ${per_output:,.3f} per 1M output tokens; "
            + (f"at {sum_words}, the cost above" if point.prefill_time_share else
               f"at {sum_words} per 1M output tokens, more than the cost above, which leaves out "
               "the steps that run each prompt alone (batch 1)"))


def _speculative(d: Any, args: argparse.Namespace) -> Any:
    """The deployment with ``--speculative method:k:acceptance`` (and ``--draft-model``)."""
    from dataclasses import replace

    from ..deployment import speculative

    spec = speculative(args.speculative)
    if args.draft_model:
        if spec.method not in ("eagle", "eagle3"):
            raise ValueError(f"--draft-model applies to --speculative eagle or eagle3 (an EAGLE "
                             f"head's checkpoint), not {spec.method}")
        spec = replace(spec, model=args.draft_model)
    return d.with_(speculative=spec)


def _speculative_cost(d: Any, point: Any, dollars_per_hour: float
                      ) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """Speculative decoding at the serving point's batch (``speculative_at_point``): JSON
    fields and rows."""
    from ..serve.speculative import speculative_at_point

    r = speculative_at_point(d, point, dollars_per_hour=dollars_per_hour)
    batch, context = r.step.batch, r.step.context_tokens
    spec = d.speculative
    data = {"method": spec.method, "num_speculative_tokens": spec.num_speculative_tokens,
            "tokens_per_step": spec.tokens_per_step, "batch": batch, "context_tokens": context,
            "tpot_s": r.tpot_s, "base_tpot_s": r.base_tpot_s, "tokens_per_s": r.tokens_per_s,
            "base_tokens_per_s": r.base_tokens_per_s, "speedup": r.speedup,
            "extra_kv_bytes_per_token": r.extra_kv_bytes_per_token,
            "lookahead_tokens": r.lookahead_tokens, "pool_tokens": r.pool_tokens,
            "base_pool_tokens": r.base_pool_tokens,
            "dollars_per_million_tokens": r.dollars_per_million,
            "base_dollars_per_million_tokens": r.base_dollars_per_million}
    room = (f" (the draft's weights, KV and lookahead slots leave room for {batch} of the "
            f"{point.batch} requests above)" if batch < point.batch else "")
    pool = (f"holds {r.pool_tokens:,} tokens instead of {r.base_pool_tokens:,}"
            if r.pool_tokens != r.base_pool_tokens else f"is unchanged, {r.pool_tokens:,} tokens")
    rows = [("speculative", f"{spec.method}, k = {spec.num_speculative_tokens}: "
                            f"{spec.tokens_per_step:.2f} tokens per step; decode steps alone "
                            f"(the speed and cost above also count prefill), at batch {batch}"
                            f"{room}: {r.tokens_per_s:,.0f} tok/s against "
                            f"{r.base_tokens_per_s:,.0f} without speculation at the same batch "
                            f"({r.speedup:.2f}×), ${r.dollars_per_million:,.3f} per 1M output "
                            f"tokens against ${r.base_dollars_per_million:,.3f}"),
            ("draft KV", f"+{r.extra_kv_bytes_per_token:,} bytes per token per GPU; the pool "
                         + pool)]
    return data, rows


def _slo(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    """Requests/s one replica sustains within a latency target, and what that means."""
    from ..engines.workloads import random_lengths
    from ..serve import load
    from .answer import SLO_REQUESTS, slo_requests_for

    d = _deployment(_with_defaults(args))
    if _parallel(d):
        raise ValueError("serving under load is modelled for one tensor-parallel group "
                         "(no --pp, --dp or --ep)")
    if args.ttft is None and args.tpot is None:
        raise _UsageError("give a target: --ttft, --tpot or both")
    slo = load.SLO(ttft_s=args.ttft, tpot_s=args.tpot, percentile=args.percentile)
    output = args.output_tokens
    if not output < args.context:
        raise ValueError(f"--output-tokens must be between 1 and --context − 1, got {output}")
    # as the landing page by default: enough requests for a queue to settle
    n = slo_requests_for(d, args.context) if args.requests is None else args.requests
    if n > 5 * SLO_REQUESTS[1]:  # a long search says so before it starts
        print(f"kvlib: simulating {n:,} requests at each rate the search tries (10 or so); "
              "this takes minutes", file=sys.stderr, flush=True)
    requests = random_lengths(n, args.context - output, output, args.range_ratio,
                              seed=args.seed)
    # --context is the mean length: the engine is started for the longest request drawn
    d = d.with_(max_model_len=max(args.context, int(requests.sum(axis=1).max())))
    cap = load.max_rate_at_slo(d, requests, slo, seed=args.seed)
    data: dict[str, Any] = {
        "model": d.model.name, "gpu": args.gpu, "n_gpus_per_replica": d.n_gpus,
        "engine": d.engine,
        "slo": {"percentile": slo.percentile, "ttft_s": slo.ttft_s, "tpot_s": slo.tpot_s},
        "requests_per_s": cap.rate_rps, "saturated_requests_per_s": cap.saturated_rps,
        "concurrent_users": cap.concurrency, "utilization": cap.utilization,
        "ttft_s_at_percentile": cap.ttft_s, "tpot_s_at_percentile": cap.tpot_s,
        "search_tolerance": cap.tolerance, "requests_simulated": n}
    rows = [("model / gpu", f"{d.model.name} on {d.n_gpus} × {args.gpu} per replica "
                            f"({_engine_words(d)}"
                            + (", scheduled as vLLM schedules)" if d.engine != "vllm" else ")")),
            ("target", ", ".join(f"p{slo.percentile:g} {name} ≤ {bound:g} s" for name, bound in
                                 (("TTFT", slo.ttft_s), ("TPOT", slo.tpot_s)) if bound is not None)),
            ("within the target", f"{cap.rate_rps:,.2f} requests/s per replica "
                                  f"(saturated: {cap.saturated_rps:,.2f}), "
                                  f"{_plural(f'{cap.concurrency:,.0f}', 'user')} in flight, "
                                  f"{cap.utilization:.0%} of saturated throughput"),
            ("simulated", f"{n:,} requests a run, Poisson arrivals, seeded")]
    if cap.rate_rps > 0 and args.peak_rps is not None:
        data["replicas"] = cap.replicas_for(args.peak_rps)
        data["gpus"] = cap.gpus_for(args.peak_rps)
        rows.append((f"for {args.peak_rps:g} requests/s",
                     f"{_plural(str(data['replicas']), 'replica')}, "
                     f"{_plural(str(data['gpus']), 'GPU')}"))
    if cap.rate_rps > 0 and args.price is not None:
        data["dollars_per_million_output_tokens"] = cap.dollars_per_million_output(args.price)
        data["dollars_per_user_hour"] = cap.dollars_per_user_hour(args.price)
        rows.append(("cost", f"${data['dollars_per_million_output_tokens']:,.3f} per 1M output "
                             f"tokens, ${data['dollars_per_user_hour']:,.3f} per user-hour at "
                             f"${args.price:,.2f} per GPU-hour"))
    if cap.rate_rps <= 0:
        rows.append(("does not meet it", f"even one request at a time gives p{slo.percentile:g} "
                     f"TTFT {cap.ttft_s:.2f} s, TPOT {cap.tpot_s:.3f} s"))
    rows.append(("TTFT", "a lower bound: published benchmarks run longer (Appendix A)"))
    return data, _table(rows)


def _recheck(args: argparse.Namespace) -> tuple[Any, str]:
    from . import recheck

    rows = []
    known = recheck.load_claims().index
    ids = args.ids or list(known)
    for claim_id in ids:
        if claim_id not in known:
            raise KeyError(f"unknown claim {claim_id!r} (see data/claims/)")
        v = recheck.recheck(claim_id)
        rows.append({"id": claim_id, "claimed": _finite(v.claimed),
                     "recomputed": _finite(v.recomputed), "unit": v.unit, "verdict": v.verdict,
                     "reason": v.reason})
    text = "\n".join(f"{r['id']:<5} {r['verdict']:<10} claimed "
                     f"{'?' if r['claimed'] is None else format(r['claimed'], ',.6g')} {r['unit']}, "
                     + ("not recomputed" if r["recomputed"] is None
                        else f"recomputed {r['recomputed']:,.4g}") + f" — {r['reason']}"
                     for r in rows)
    return rows, text


def _finite(value: float) -> float | None:
    """``value``, or None (JSON ``null``) where there is no number: an unverifiable claim has no
    recomputed value, and its reason says why."""
    return float(value) if math.isfinite(value) else None


def _models(args: argparse.Namespace) -> tuple[Any, str]:
    from ..model.registry import registry_table

    table = registry_table(args.dtype)[["slug", "attention", "layers", "kv_bytes_per_token"]]
    rows = table.to_dict(orient="records")
    slug = max(len(r["slug"]) for r in rows)  # the longest name sets the column
    kind = max(len(r["attention"]) for r in rows)
    text = "\n".join(f"{r['slug']:<{slug}} {r['attention']:<{kind}} {r['layers']:>4} layers  "
                     f"{r['kv_bytes_per_token'] / 1024:>9,.2f} KiB/token" for r in rows)
    return rows, text


def _deployment_flags(p: argparse.ArgumentParser) -> None:
    """The flags of ``fit``, ``cost`` and ``slo`` that set the deployment beside GPU, model and
    context (None: not given, ``_with_defaults`` fills it)."""
    from ..deployment import ENGINES

    p.add_argument("--engine", choices=ENGINES, default="vllm",
                   help="serving engine whose pool, limits, step cost and launch command to "
                        "use (default vllm)")
    p.add_argument("--engine-version", default=None,
                   help="the vLLM release whose start-up memory rules size the pool, e.g. "
                        "0.19.0 (default: the pinned release, data/vllm_memory_rules.csv)")
    p.add_argument("--util", type=_real(lambda v: 0 < v <= 1, "in (0, 1]"), default=None,
                   help="the engine's memory fraction: vLLM's --gpu-memory-utilization (default "
                        "0.9, the book's; the release's own with --engine-version), SGLang's --mem-fraction-static (default: SGLang's "
                        "rule), TensorRT-LLM's free_gpu_memory_fraction (default 0.9)")
    p.add_argument("--tp", type=_integer(1), default=None, help="tensor-parallel GPUs (default 1)")
    p.add_argument("--pp", type=_integer(1), default=None,
                   help="pipeline stages, vLLM's --pipeline-parallel-size (default 1)")
    p.add_argument("--dp", type=_integer(1), default=None,
                   help="data-parallel ranks, vLLM's --data-parallel-size (default 1)")
    p.add_argument("--ep", type=_integer(1), default=None,
                   help="expert-parallel GPUs of a MoE: 1 or tp × dp, vLLM's "
                        "--enable-expert-parallel (default 1)")
    p.add_argument("--weight-dtype", default=None,
                   help="weight format: bf16, fp8, int4-g128, mxfp4, ..., or per component "
                        "as experts=mxfp4 (default: the format of the checkpoint the model's "
                        "config describes, bf16 for most)")
    p.add_argument("--kv-dtype", default=None, help="KV dtype (default bf16)")
    p.add_argument("--max-num-seqs", type=_integer(1), default=None,
                   help="most requests decoded together: vLLM's --max-num-seqs (default: vLLM's "
                        "for the GPU), SGLang's --max-running-requests, TensorRT-LLM's "
                        "max_batch_size (default: each engine's)")
    p.add_argument("--max-num-batched-tokens", type=_integer(1), default=None,
                   help="token budget of one step: vLLM's --max-num-batched-tokens (default "
                        "8192), SGLang's --chunked-prefill-size (default: SGLang's for the GPU), "
                        "TensorRT-LLM's max_num_tokens (default 8192)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="kvlib", description=__doc__.splitlines()[0], epilog=EXAMPLES,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"kvlib {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def command(name: str, fn: Callable, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text, epilog=EXAMPLES,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        p.add_argument("--json", action="store_true", help="print JSON instead of a table")
        p.set_defaults(fn=fn)
        return p

    p = command("kv", _kv, "KV bytes per token and for one sequence")
    p.add_argument("model", help="registry slug or path to a config.json")
    p.add_argument("--tokens", type=_integer(0), default=8192,
                   help="sequence length in tokens (default 8192)")
    p.add_argument("--dtype", default="bf16", help="KV dtype: fp32, fp16, bf16, fp8, int8, int4, fp4")
    p.add_argument("--tp", type=_integer(1), default=1,
                   help="tensor-parallel GPUs (bytes are per GPU)")

    p = command("fit", _fit, "the KV pool an engine leaves and how many requests fit")
    p.add_argument("model", help="registry slug or path to a config.json")
    p.add_argument("gpu", help="GPU slug, e.g. h100-sxm (see data/gpus.csv)")
    p.add_argument("--context", type=_integer(1), default=None,
                   help="tokens per request, vLLM's --max-model-len (default 8192)")
    p.add_argument("--allow-long-context", action="store_true",
                   help="accept a context past the model's maximum, as vLLM does with "
                        "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1")
    _deployment_flags(p)
    p.add_argument("--output-tokens", type=_integer(1), default=None,
                   help="generated tokens of a request (default min(1024, context ÷ 2))")

    p = command("cost", _cost, "$ per 1M tokens from $/hour and tokens/s, or for a model on a GPU")
    p.add_argument("model", nargs="?", help="registry slug or config.json (instead of --tps)")
    p.add_argument("gpu", nargs="?", help="GPU slug, with a model")
    p.add_argument("--price", type=_POSITIVE, required=True,
                   help="dollars per hour (with a model: per GPU-hour)")
    p.add_argument("--tps", type=_POSITIVE, help="tokens per second (instead of a model)")
    p.add_argument("--context", type=_integer(1), default=None,
                   help="tokens per request (default 8192)")
    p.add_argument("--allow-long-context", action="store_true",
                   help="accept a context past the model's maximum (with a model, as for fit)")
    p.add_argument("--output-tokens", type=_integer(1), default=None,
                   help="generated tokens of a request (default min(1024, context ÷ 2))")
    _deployment_flags(p)
    p.add_argument("--speculative", default=None, metavar="METHOD:K:ACCEPTANCE",
                   help="speculative decoding (vLLM): mtp, eagle, eagle3 or ngram, k drafted "
                        "tokens, the acceptance rate or per-position rates joined by / "
                        "(e.g. mtp:1:0.85)")
    p.add_argument("--draft-model", default=None,
                   help="the EAGLE head's checkpoint repository (for --speculative eagle/eagle3)")

    p = command("slo", _slo, "requests/s, users and $ within a latency target (simulated load)")
    p.add_argument("model", help="registry slug or config.json")
    p.add_argument("gpu", help="GPU slug, e.g. h100-sxm")
    p.add_argument("--ttft", type=_POSITIVE, default=None, help="target TTFT at the percentile (s)")
    p.add_argument("--tpot", type=_POSITIVE, default=None,
                   help="target time per output token at the percentile (s; 0.05 = 20 tok/s)")
    p.add_argument("--percentile", type=_real(lambda v: 0 < v <= 100, "in (0, 100]"),
                   default=99.0, help="percentile, above 0 and at most 100 (default 99)")
    p.add_argument("--context", type=_integer(1), default=2300,
                   help="mean prompt + output tokens of a request (default 2300)")
    p.add_argument("--output-tokens", type=_integer(1), default=300,
                   help="mean generated tokens (default 300)")
    p.add_argument("--range-ratio", type=_real(lambda v: 0 <= v < 1, "in [0, 1)"), default=0.5,
                   help="lengths uniform within ± this share of the means (default 0.5)")
    p.add_argument("--requests", type=_integer(1), default=None,
                   help="simulated requests (default: 40 × the batch the pool holds, within "
                        "1,000–4,000, as the book's landing page)")
    p.add_argument("--seed", type=_integer(0), default=0, help="seed of lengths and arrivals")
    p.add_argument("--peak-rps", type=_POSITIVE, default=None, help="peak requests/s to size for")
    p.add_argument("--price", type=_POSITIVE, default=None, help="dollars per GPU-hour")
    _deployment_flags(p)

    p = command("recheck", _recheck, "recheck published claims from data/claims/")
    p.add_argument("ids", nargs="*", help="claim ids (default: all)")

    p = command("models", _models, "list the model registry")
    p.add_argument("--dtype", default="bf16", help="KV dtype for the per-token column")
    return parser


def _error(message: object) -> int:
    """Print one line to stderr and return the usage-error status, 2."""
    print(f"kvlib: error: {' '.join(str(message).split())}", file=sys.stderr)
    return 2


def _write(text: str) -> int:
    """Print ``text``; a reader that closed the pipe early (``| head``) is not an error."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        # Python flushes stdout again at exit: point it at /dev/null so that flush is silent.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 answer, 2 bad input)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        data, text = args.fn(args)
        out = json.dumps(data, indent=2, default=str, allow_nan=False) if args.json else text
    except SystemExit as exc:  # --help and --version print, then exit 0
        return exc.code if isinstance(exc.code, int) else 0
    except _UsageError as exc:
        return _error(f"{exc} (see kvlib --help)")
    except KeyError as exc:
        return _error(exc.args[0] if exc.args else exc)
    except ValueError as exc:
        return _error(exc)
    return _write(out)


if __name__ == "__main__":
    sys.exit(main())
