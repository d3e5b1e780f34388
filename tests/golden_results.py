"""A fixed grid of kvlib's public results, written once before the house refactor (issue 18) into
``tests/data/golden_public_results.json``; ``tests/test_golden.py`` requires the same numbers now.

Only public entry points are called, in the keyword forms readers use. Regenerate (only when a
number is meant to change, and say why in the commit): ``.venv/bin/python tests/golden_results.py``.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "data" / "golden_public_results.json"

MODELS = ("llama-3.1-8b", "llama-3.1-70b", "qwen3-32b", "qwen3-30b-a3b", "deepseek-v3",
          "gpt-oss-120b", "gemma-3-27b", "jamba-v0.1", "qwen3-next-80b-a3b", "mixtral-8x7b",
          "qwen3.5-35b-a3b", "llama-4-scout-17b-16e-instruct")
GPUS = ("h100-sxm", "a100-80gb", "l40s", "mi300x", "b200")
KV = ("bf16", "fp8")
WEIGHTS = ("bf16", "fp8")
TP = (1, 2, 4, 8)


def _value(x: Any) -> Any:
    if isinstance(x, float):
        return None if math.isnan(x) else float(f"{x:.12g}")
    return x


def _attempt(fn, *args, **kw) -> Any:
    try:
        return fn(*args, **kw)
    except (ValueError, KeyError, TypeError) as exc:
        return f"error: {type(exc).__name__}"


def public_results(every: int = 1) -> dict[str, Any]:
    """The grid; with ``every`` > 1 the step and serving results only of every ``every``-th
    (model, GPU) pair (all pools, KV sizes, prefix costs and verdicts): what the test checks."""
    import kvlib
    from kvlib import input_cost_per_million, recheck_all
    from kvlib import serving_point

    out: dict[str, Any] = {}
    for m in MODELS:
        model = kvlib.load_model(m)
        out[f"kv/{m}/bf16"] = model.kv_bytes_per_token("bf16")
        out[f"kv/{m}/fp8/32768"] = model.kv_bytes(32768, "fp8")
        for g in GPUS:
            stepped = (MODELS.index(m) + GPUS.index(g)) % every == 0
            for tp in TP:
                for w in WEIGHTS:
                    for kv in KV:
                        key = f"pool/{m}/{g}/tp{tp}/{w}/{kv}"
                        pool = _attempt(kvlib.kv_pool, m, g, n_gpus=tp, weight_dtype=w,
                                        kv_dtype=kv)
                        if isinstance(pool, str):
                            out[key] = pool
                            continue
                        out[key] = [pool.num_blocks, pool.tokens, pool.available_kv_bytes,
                                    pool.weights_bytes_per_gpu, pool.activation_peak_bytes,
                                    _value(pool.max_concurrency(8192))]
                        if pool.num_blocks <= 0 or not stepped:
                            continue
                        for batch, ctx in ((1, 1024), (32, 4096), (256, 8192)):
                            s = _attempt(kvlib.decode_step, m, g, batch=batch, context_tokens=ctx,
                                         n_gpus=tp, weight_dtype=w, kv_dtype=kv)
                            out[f"decode/{m}/{g}/tp{tp}/{w}/{kv}/{batch}/{ctx}"] = (
                                s if isinstance(s, str) else [_value(s.time_s), s.bound])
                        p = _attempt(kvlib.prefill_step, m, g, batch=1, prompt_tokens=2048,
                                     n_gpus=tp, weight_dtype=w, kv_dtype=kv)
                        out[f"prefill/{m}/{g}/tp{tp}/{w}/{kv}"] = (
                            p if isinstance(p, str) else _value(p.time_s))
        for g in GPUS:
            if (MODELS.index(m) + GPUS.index(g)) % every:
                continue
            for w in WEIGHTS:
                for inp, outp in ((1024, 256), (8000, 1000)):
                    pt = _attempt(serving_point, m, g, input_tokens=inp, output_tokens=outp,
                                  weight_dtype=w, kv_dtype="fp8")
                    key = f"serve/{m}/{g}/{w}/{inp}/{outp}"
                    if isinstance(pt, str):
                        out[key] = pt
                        continue
                    out[key] = [pt.n_gpus, pt.batch, _value(pt.max_concurrency), _value(pt.tpot_s),
                                _value(pt.ttft_s), _value(pt.tokens_per_s), pt.limit,
                                _value(pt.dollars_per_million(2.9)) if pt.fits else None,
                                [_value(x) for x in pt.dollars_per_million_split(2.9)]
                                if pt.fits else None,
                                None if pt.band is None else [_value(pt.band.low),
                                                              _value(pt.band.high)]]
    for m in ("llama-3.1-8b", "llama-3.1-70b", "qwen3-next-80b-a3b", "deepseek-v3"):
        for hit in (0.0, 0.6):
            out[f"prefix/{m}/{hit}"] = _value(_attempt(
                input_cost_per_million, m, "h100-sxm", dollars_per_gpu_hour=2.9, hit_rate=hit,
                n_gpus=8 if m == "deepseek-v3" else 1,
                weight_dtype="fp8" if m == "deepseek-v3" else "bf16"))
    res = recheck_all()
    for _, r in res.iterrows():
        out[f"recheck/{r['id']}"] = [r["verdict"], _value(float(r["recomputed"]))]
    return out


#: The sample ``tests/test_golden.py`` checks: every pool, size, prefix cost and verdict, and the
#: steps and serving points of a third of the (model, GPU) pairs (the file holds them all).
CHECKED_EVERY = 3

if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["--sample"]:  # the tested sample, to the file named (the test's run)
        Path(sys.argv[2]).write_text(json.dumps(public_results(every=CHECKED_EVERY),
                                                sort_keys=True))
    else:
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(public_results(), indent=0, sort_keys=True) + "\n")
        print(f"wrote {GOLDEN}")
