"""The parallel step model (``kvlib.speed.parallel``) against the measured points that ran with
expert parallelism or data-parallel attention.

The fit (``kvlib.fit.calibrate``) times every point as one tensor-parallel group; here each
such point also gets ``parallel_decode``'s time, as the fit's own prediction × (the parallel
pass ÷ the single-group decode step at the same batch and context) — so chunked prefill and the
fitted constants stay exactly the fit's, and only the parallel terms change the number.

SGLang's flags map to a ``Deployment`` as vLLM counts GPUs: ``--tp T --dp D
--enable-dp-attention`` is tp = T ÷ D attention GPUs per rank and dp = D ranks; its ``--ep``
spreads experts over every GPU either way (with ep < T its experts are also tensor-split), so
the step uses ep = tp × dp when ``--ep`` is set and 1 otherwise.
"""
from __future__ import annotations

import math
import re
from dataclasses import replace
from functools import lru_cache

import pandas as pd

from ..core.data import csv_path
from ..deployment import Deployment
from ..model.weights import params_for
from ..speed import roofline
from ..speed.parallel import parallel_decode
from . import calibrate

_DP = re.compile(r"--dp(?:-size)? (\d+)")


def _layout(tp: int, ep: int, dp_attention: bool, notes: str, point_id: str) -> tuple[int, int, int]:
    """(tp, dp, ep) of a ``Deployment`` for an SGLang run of ``--tp tp --ep ep``."""
    if not dp_attention:
        return tp, 1, (tp if ep > 1 else 1)
    found = _DP.search(notes)
    if found is None:
        raise ValueError(f"{point_id}: data-parallel attention without a --dp size in its notes")
    dp = int(found.group(1))
    return tp // dp, dp, (tp if ep > 1 else 1)


def _measured() -> pd.DataFrame:
    frames = []
    for name, label in (("throughput.csv", "fit set"), (calibrate.FRESH_FILE, "fresh set")):
        t = pd.read_csv(csv_path(name), keep_default_na=False, dtype=str)
        ep = pd.to_numeric(t["ep"], errors="coerce").fillna(1)
        dpa = t["dp_attention"].str.lower().isin(("true", "yes", "1"))
        frames.append(t[(ep > 1) | dpa].assign(ep=ep[(ep > 1) | dpa].astype(int),
                                               dp_attention=dpa[(ep > 1) | dpa], set=label))
    return pd.concat(frames).set_index("id")


def _placed():
    """(id, raw row, fit point) of every serving TPOT point with EP or DP attention the fit
    can place."""
    fit_pts, fresh = calibrate.speed_points(), calibrate.fresh_points()
    for point_id, t in _measured().iterrows():
        pts = fit_pts if t["set"] == "fit set" else fresh
        if point_id not in pts.index:
            continue
        p = pts.loc[point_id]
        if p["metric"] == "time_per_output_token_s" and p["mode"] == "serving":
            yield point_id, t, p


def _layouts(point_id: str, t: pd.Series, p: pd.Series) -> tuple[Deployment, Deployment, int, int]:
    """(the single-group deployment, the parallel one, the decode batch of the whole
    deployment, the mean context in tokens) of point ``p`` with raw row ``t``."""
    tp, dp, ep = _layout(int(p["tp"]), int(t["ep"]), bool(t["dp_attention"]), t["notes"],
                         point_id)
    base = Deployment(p["model"], p["gpu"], tp=int(p["tp"]), weights=p["weight_format"],
                      kv=p["kv_dtype"], engine=p["engine"])
    ctx = int(p["input_tokens"]) + int(p["output_tokens"]) // 2
    return base, base.with_(tp=tp, dp=dp, ep=ep), calibrate.decode_batch(p), ctx


@lru_cache(maxsize=1)
def parallel_validation() -> pd.DataFrame:
    """Every decode (TPOT) point measured with expert parallelism or data-parallel attention
    that the fit can place: id, set ("fit set": in ``throughput.csv``, which the fit may have
    trained on; "fresh set": never fitted), engine, model, gpu, concurrency, tp / dp / ep (the
    ``Deployment``'s), measured (s), single_group (the fit's prediction, s), parallel (s), and
    the errors of both (predicted ÷ measured − 1).

    Why the four data-parallel-attention points (SGLang cookbook, fresh set) run far slower
    than modelled (``dp_attention_terms`` gives each figure): not the parallel terms. The
    exchange costs about a millisecond a pass, DeepEP's measured kernels in its place a few
    (B200; none measured on MI300X), expert load imbalance at most about 2 ms (the busiest GPU
    reading all its experts), and the batch is already the slowest rank's (⌈batch ÷ dp⌉) —
    under 6 ms together against gaps of 6–120 ms. Part of the miss is the source's: its own
    one-group points at concurrency 100 miss by about 40% — the single-group fit's miss, not
    the parallel terms'; divided out, the rest (about half) is
    SGLang's way of running DP attention, which the step law has no term or measured figure for:
    every rank joins every forward (an idle rank runs an empty batch) and a prompt on any rank
    makes the step an extend without CUDA graphs for all (``can_cuda_graph`` is the minimum over
    ranks; SGLang ``managers/scheduler_dp_attn_mixin.py`` at e10572a) — at concurrency 100 with
    ShareGPT's 188-token mean outputs, a prompt arrives every second step.
    """
    rows = []
    for point_id, t, p in _placed():
        base, wide, batch, ctx = _layouts(point_id, t, p)
        single = calibrate.parts(p).predict(roofline.CALIBRATED)
        ratio = (parallel_decode(wide, batch=math.ceil(batch / wide.dp), context_tokens=ctx).tpot_s
                 / roofline.decode_step(base, batch=batch, context_tokens=ctx).time_s)
        measured = float(p["value"])
        rows.append({"id": point_id, "set": t["set"], "engine": t["engine"], "model": p["model"],
                     "gpu": p["gpu"], "concurrency": int(p["concurrency"]), "tp": wide.tp,
                     "dp": wide.dp, "ep": wide.ep, "measured": measured, "single_group": single,
                     "parallel": single * ratio, "single_group_error": single / measured - 1,
                     "parallel_error": single * ratio / measured - 1})
    return pd.DataFrame(rows).set_index("id")


def expert_imbalance_s(d: Deployment, tokens: int) -> float:
    """Upper bound (s) on what expert load imbalance adds to one pass of ``tokens`` tokens over
    the stage (all ranks'): the busiest GPU reads every one of its experts in every MoE layer,
    against the expected share uniform routing touches, at the fit's weight bandwidth. 0 when
    the experts are tensor-split (ep = 1: every GPU reads a slice of every touched expert;
    a model without experts has ep = 1)."""
    if d.ep == 1:
        return 0.0
    counts = params_for(d.model)
    experts = replace(counts, components={"experts": counts.components["experts"]})
    gpus = d.tp * d.dp
    every = roofline.step_weight_bytes(experts, d.weights, gpus, 10 ** 9)
    touched = roofline.step_weight_bytes(experts, d.weights, gpus, tokens)
    return (every - touched) / (d.gpu.bandwidth() * roofline.CALIBRATED.bandwidth)


@lru_cache(maxsize=1)
def dp_attention_terms() -> pd.DataFrame:
    """What each candidate cause could add to the pass of every data-parallel-attention point of
    ``parallel_validation`` (seconds), beside its gap (measured − parallel): exchange_s, the
    modelled expert exchange (a gather and a scatter paying their latencies twice would add
    as much again); deepep_s, DeepEP's measured dispatch + combine in its place
    (``data/alltoall.csv``; the allgather time where the GPU has no rows); imbalance_s,
    ``expert_imbalance_s``; and same_source_error, the median single-group error of the fresh
    points from the same source at the same concurrency run as one group (no ``--ep``, no DP
    attention) — the part of the miss that is not the parallel terms'; beyond_source_error, what
    is left: (1 + parallel error) ÷ (1 + same_source_error) − 1."""
    v = parallel_validation()
    fresh = calibrate.fresh_validation()
    raw = pd.read_csv(csv_path(calibrate.FRESH_FILE), keep_default_na=False, dtype=str)
    plain = set(raw.loc[(raw["ep"] == "") & (raw["dp_attention"].str.lower() != "true"), "id"])
    one_group = fresh[fresh.index.isin(plain)]
    rows = []
    for point_id, t, p in _placed():
        if v.loc[point_id, "dp"] == 1:
            continue
        _, wide, batch, ctx = _layouts(point_id, t, p)
        b = math.ceil(batch / wide.dp)
        step = parallel_decode(wide, batch=b, context_tokens=ctx)
        deepep = parallel_decode(wide, batch=b, context_tokens=ctx, exchange="deepep")
        same = one_group[(one_group["source_group"] == p["source_group"])
                         & (one_group["concurrency"] == p["concurrency"])]
        rows.append({"id": point_id, "gap_s": v.loc[point_id, "measured"] - v.loc[point_id, "parallel"],
                     "exchange_s": step.exchange_s, "deepep_s": deepep.exchange_s,
                     "imbalance_s": expert_imbalance_s(wide, b * wide.dp),
                     "same_source_error": float(same["error"].median()), "same_source_n": len(same)})
    out = pd.DataFrame(rows).set_index("id")
    out["beyond_source_error"] = ((1 + v.loc[out.index, "parallel_error"])
                                  / (1 + out["same_source_error"]) - 1)
    return out

