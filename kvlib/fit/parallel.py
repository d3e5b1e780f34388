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
from functools import lru_cache

import pandas as pd

from ..core.data import csv_path
from ..deployment import Deployment
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


@lru_cache(maxsize=1)
def parallel_validation() -> pd.DataFrame:
    """Every decode (TPOT) point measured with expert parallelism or data-parallel attention
    that the fit can place: id, set ("fit set": in ``throughput.csv``, which the fit may have
    trained on; "fresh set": never fitted), engine, model, gpu, concurrency, tp / dp / ep (the
    ``Deployment``'s), measured (s), single_group (the fit's prediction, s), parallel (s), and
    the errors of both (predicted ÷ measured − 1)."""
    raw = _measured()
    fit_pts, fresh = calibrate.speed_points(), calibrate.fresh_points()
    rows = []
    for point_id, t in raw.iterrows():
        pts = fit_pts if t["set"] == "fit set" else fresh
        if point_id not in pts.index:
            continue
        p = pts.loc[point_id]
        if p["metric"] != "time_per_output_token_s" or p["mode"] != "serving":
            continue
        tp, dp, ep = _layout(int(p["tp"]), int(t["ep"]), bool(t["dp_attention"]), t["notes"],
                             point_id)
        parts = calibrate.parts(p)
        single = parts.predict(roofline.CALIBRATED)
        batch, ctx = parts.batch, int(p["input_tokens"]) + int(p["output_tokens"]) // 2
        base = Deployment(p["model"], p["gpu"], tp=int(p["tp"]), weights=p["weight_format"],
                          kv=p["kv_dtype"], engine=p["engine"])
        wide = base.with_(tp=tp, dp=dp, ep=ep)
        ratio = (parallel_decode(wide, batch=math.ceil(batch / dp), context_tokens=ctx).tpot_s
                 / roofline.decode_step(base, batch=batch, context_tokens=ctx).time_s)
        measured = float(p["value"])
        rows.append({"id": point_id, "set": t["set"], "engine": t["engine"], "model": p["model"],
                     "gpu": p["gpu"], "concurrency": int(p["concurrency"]), "tp": tp, "dp": dp,
                     "ep": ep, "measured": measured, "single_group": single,
                     "parallel": single * ratio, "single_group_error": single / measured - 1,
                     "parallel_error": single * ratio / measured - 1})
    return pd.DataFrame(rows).set_index("id")
