"""kvlib.report.charts: the book's one chart module (theme, renderer, builders)."""
from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from kvlib.report import charts


def test_stacked_bars_labels_and_order():
    df = pd.DataFrame({"system": ["A", "A", "B", "B"], "part": ["used", "free"] * 2,
                       "pct": [20.0, 80.0, 96.0, 2.0]})
    chart = charts.stacked_bars(df, "system", "pct", "part", ["used", "free"], "share (%)")
    spec = chart.to_dict()
    rows = spec["datasets"][next(iter(spec["datasets"]))]
    mids = {(r["system"], r["part"]): r["_mid"] for r in rows}
    assert mids == {("A", "used"): 10.0, ("A", "free"): 60.0, ("B", "used"): 48.0, ("B", "free"): 97.0}
    labels = {(r["system"], r["part"]): r["_label"] for r in rows}
    assert labels[("B", "free")] == "" and labels[("A", "used")] == "20.0"  # under label_min: none
    with pytest.raises(ValueError, match="stack_order"):
        charts.stacked_bars(df, "system", "pct", "part", ["used"], "share (%)")


def test_grouped_stacked_bars_sit_side_by_side_not_in_facets():
    df = pd.DataFrame({"system": ["A"] * 4, "part": ["used", "free"] * 2, "pct": [20.0, 80.0] * 2,
                       "src": ["paper", "paper", "sim", "sim"]})
    spec = charts.stacked_bars(df, "system", "pct", "part", ["used", "free"], "share (%)",
                               group="src").to_dict()
    assert "facet" not in spec  # a facet could not stretch to the column's width
    bars, _, names = spec["layer"]
    assert bars["encoding"]["xOffset"]["field"] == "src"
    assert names["encoding"]["text"]["field"] == "src"  # each bar says which group it is


def test_heatmap_single_and_faceted():
    df = pd.DataFrame({"bs": [1, 16, 1, 16], "p": [0.0, 0.0, 0.3, 0.3], "v": [1.0, 0.9, 0.8, 0.7],
                       "panel": ["a", "a", "b", "b"]})
    single = charts.heatmap(df, "bs", "p", "v", "block size", "penalty", "relative", domain_mid=1.0)
    assert "layer" in single.to_dict()
    faceted = charts.heatmap(df, "bs", "p", "v", "block size", "penalty", "relative", facet="panel")
    spec = faceted.to_dict()
    assert spec["facet"]["field"] == "panel" and spec["columns"] == 2  # side by side
    phone = spec["usermeta"]["kvlib_narrow"]
    assert phone["columns"] == 1  # one above the other on a phone


def test_lines_distinguish_gives_each_series_a_dash_and_a_shape():
    df = pd.DataFrame({"tp": [1, 2, 1, 2], "kib": [320.0, 160.0, 320.0, 160.0],
                       "model": ["a", "a", "b", "b"]})
    plain = charts.lines(df, "tp", "kib", "model", "t", "KiB").to_dict()
    assert all("strokeDash" not in lay["encoding"] and "shape" not in lay["encoding"]
               for lay in plain["layer"])
    line, point = charts.lines(df, "tp", "kib", "model", "t", "KiB", distinguish=True).to_dict()["layer"]
    assert line["encoding"]["strokeDash"]["field"] == "model"
    assert point["encoding"]["shape"]["field"] == "model"


def test_one_colour_per_attention_kind_in_every_chart():
    a = pd.DataFrame({"model": ["x", "y"], "kib": [70.0, 320.0], "attention": ["MLA", "GQA"]})
    b = pd.DataFrame({"model": ["x", "y", "z"], "kib": [70.0, 16.0, 9.0],
                      "attention": ["MLA", "GQA+hybrid", "GQA+SWA"]})

    def scale(spec):
        enc = spec.get("encoding") or spec["layer"][0]["encoding"]
        s = enc["color"]["scale"]
        return dict(zip(s["domain"], s["range"]))

    first = scale(charts.sorted_bars(a, "kib", "model", "KiB", color="attention").to_dict())
    second = scale(charts.sorted_bars(b, "kib", "model", "KiB", color="attention").to_dict())
    assert first["MLA"] == second["MLA"] == charts.KIND_COLOURS["MLA"]
    assert len(set(charts.KIND_COLOURS[k] for k in ("MHA", "GQA", "MQA", "MLA", "GQA+SWA",
                                                    "GQA+hybrid"))) == 6  # all different
    assert charts.kind_colour("GQA+chunked") == charts.kind_colour("GQA+chunked")  # stable spare
    # a column that is not attention kinds keeps the book's palette
    other = charts.sorted_bars(a.assign(c=["p", "q"]), "kib", "model", "KiB", color="c").to_dict()
    assert "scale" not in other["encoding"]["color"]


def test_sorted_bars_log_scale_starts_below_the_smallest_bar():
    df = pd.DataFrame({"model": ["a", "b"], "kib": [6.0, 2560.0]})
    x = charts.sorted_bars(df, "kib", "model", "KiB", log=True).to_dict()["encoding"]["x"]
    assert x["scale"]["type"] == "log" and x["scale"]["domainMin"] == 3.0  # half of 6 KiB
    assert x["stack"] is None  # a stacked bar would start at 0, which a log axis cannot show


def test_log_axes_tick_at_powers_of_ten():
    # bars from 6 to 2,560 KiB: three decades, so 10, 100 and 1,000 only (no 20, 30, 200, 300)
    df = pd.DataFrame({"model": ["a", "b"], "kib": [6.0, 2560.0]})
    x = charts.sorted_bars(df, "kib", "model", "KiB", log=True).to_dict()["encoding"]["x"]
    assert x["axis"]["values"] == [10.0, 100.0, 1000.0]
    # 5 to 60 (from 2.5, half the smallest): one power of ten inside, so 1-2-5 steps
    assert charts._log_ticks([5.0, 60.0]) == [5.0, 10.0, 20.0, 50.0]
    lines = pd.DataFrame({"x": [1, 2], "y": [0.16, 320.0], "s": ["a", "a"]})
    y = charts.lines(lines, "x", "y", "s", "x", "y", log_y=True).to_dict()["layer"][0]["encoding"]["y"]
    assert y["axis"]["values"] == [0.1, 1.0, 10.0, 100.0]


def test_axis_labels_that_would_touch_are_dropped():
    assert charts._theme()["config"]["axis"]["labelSeparation"] > 0


def test_long_legend_names_get_two_wide_columns():
    short = charts._colour("s", ["GQA-8", "MQA"])
    long = charts._colour("s", ["GQA-8, 1:1 local:global, W 4,096", "MQA"])
    assert short.to_dict().get("legend") is None
    legend = long.to_dict()["legend"]
    assert "/ 320" in legend["columns"]["expr"] and "260" in legend["labelLimit"]["expr"]


def test_renderer_fits_single_charts_to_the_column():
    df = pd.DataFrame({"x": [1, 2], "y": [3.0, 4.0], "s": ["a", "b"]})
    spec = json.loads(_spec_text(charts.lines(df, "x", "y", "s", "x", "y")))
    assert spec["width"] == "container"
    assert spec["autosize"] == {"type": "fit-x", "contains": "padding", "resize": True}
    # a faceted chart keeps its computed layout; its phone layout travels without shared data
    hm = pd.DataFrame({"bs": [1, 16] * 2, "p": [0.0] * 4, "v": [1.0] * 4, "f": ["a", "a", "b", "b"]})
    faceted = json.loads(_spec_text(charts.heatmap(hm, "bs", "p", "v", "b", "p", "v", facet="f")))
    assert "width" not in faceted and faceted["usermeta"]["kvlib_narrow"]["datasets"] == {}


def _spec_text(chart) -> str:
    html = charts._render(chart.to_dict())["text/html"]
    return html.split('data-target="')[1].split('">', 1)[1].rsplit("</script>", 1)[0]


def test_theme_legends_wrap_to_the_container():
    config = charts._theme()["config"]
    assert config["legend"]["orient"] == "bottom"
    assert "containerSize()" in config["legend"]["columns"]["expr"]
    assert config["view"]["continuousWidth"] + 80 <= charts.COLUMN_WIDTH


def test_versus_chart_drops_what_a_log_axis_cannot_show():
    df = pd.DataFrame({"c": [1.0, 10.0, 0.0, -1.0, math.nan], "r": [1.1, 9.0, 1.0, 2.0, 3.0],
                       "v": ["holds", "rounding", "holds", "wrong", "wrong"]})
    spec = charts.versus_chart(df, "c", "r", "v", "claimed", "recomputed").to_dict()
    points = [layer for layer in spec["layer"] if layer["mark"]["type"] == "point"][0]
    data = spec["datasets"][points["data"]["name"]]
    assert sorted(row["c"] for row in data) == [1.0, 10.0]
    assert points["encoding"]["x"]["scale"]["type"] == "log"
    assert [p["bind"] for p in spec["params"]] == ["legend"]  # click a verdict to filter
    with pytest.raises(ValueError, match="no row"):
        charts.versus_chart(pd.DataFrame({"c": [0.0], "r": [1.0], "v": ["x"]}), "c", "r", "v", "a", "b")


def test_error_bars_clip_and_label_outliers():
    df = pd.DataFrame({"row": ["a", "b"], "err": [5.0, 320.0], "kind": ["x", "y"]})
    spec = charts.error_bars(df, "err", "row", "kind", "error (%)", limit=50).to_dict()
    data = list(spec["datasets"].values())[0]
    assert [r["_shown"] for r in data] == [5.0, 50.0]
    assert [r["_note"] for r in data] == ["", "+320%"]
    with pytest.raises(KeyError):
        charts.error_bars(df, "nope", "row", "kind", "t")


def test_priced_lines_draw_the_speed_band_as_an_area():
    # 1 GPU at $2/h, 1,000 tokens/s: $0.5556 per 1M; band −20% … +25% on the rate gives
    # 0.5556 / 1.25 = $0.4444 … 0.5556 / 0.8 = $0.6944 (cheap end from the fast end)
    df = pd.DataFrame({"gpu": ["h100-sxm"] * 2, "context": ["8,192 tokens"] * 2, "batch": [1, 2],
                       "n_gpus": [1, 1], "tokens_per_s": [1000.0, 1800.0],
                       "band_low": [-0.2, -0.2], "band_high": [0.25, 0.25]})
    kw = dict(x="batch", rate="tokens_per_s", units="n_gpus", series="context", select="gpu",
              x_title="batch", y_title="$ per 1M", price=2.0, price_range=(0.5, 5.0))
    plain = charts.priced_lines(df, **kw).to_dict()
    assert [layer["mark"]["type"] for layer in plain["layer"]] == ["line", "point"]
    spec = charts.priced_lines(df, band=("band_low", "band_high"), **kw).to_dict()
    area = spec["layer"][0]
    assert area["mark"]["type"] == "area" and area["encoding"]["y2"]["field"] == "band_dear"
    calc = {t["as"]: t["calculate"] for t in area["transform"] if "calculate" in t}
    assert calc["band_cheap"] == ("price * datum.n_gpus / (datum.tokens_per_s * (1 + datum.band_high)"
                                  " * 3600) * 1000000")
    assert "(1 + datum.band_low)" in calc["band_dear"]
    assert {p["name"] for p in spec["params"]} == {"price", "pick"}
    with pytest.raises(KeyError, match="band"):
        charts.priced_lines(df, band=("lo", "hi"), **kw)


def test_heatmap_shows_extra_tooltip_columns():
    df = pd.DataFrame({"x": ["a", "b"], "y": ["g", "g"], "v": [1.0, 2.0], "n": [3, 4]})
    rect = charts.heatmap(df, "x", "y", "v", "x", "y", "v", tooltip=["n"]).to_dict()["layer"][0]
    assert [t["field"] for t in rect["encoding"]["tooltip"]] == ["x", "y", "v", "n"]


def test_with_targets_draws_one_labelled_rule_per_target_on_the_charts_y():
    df = pd.DataFrame({"load": [0.2, 1.0] * 2, "seconds": [0.3, 9.0, 0.02, 0.1],
                       "metric": ["p99 TTFT"] * 2 + ["p99 TPOT"] * 2})
    targets = pd.DataFrame({"seconds": [2.0, 0.05], "label": ["TTFT target", "TPOT target"]})
    spec = charts.with_targets(charts.lines(df, "load", "seconds", "metric", "load", "s",
                                            log_y=True), targets, "seconds").to_dict()
    rule, text = spec["layer"][1], spec["layer"][2]
    assert rule["mark"]["type"] == "rule" and rule["encoding"]["y"]["field"] == "seconds"
    assert text["mark"]["type"] == "text" and text["encoding"]["text"]["field"] == "label"
    rows = spec["datasets"][rule["data"]["name"]]
    assert [(r["seconds"], r["label"]) for r in rows] == [(2.0, "TTFT target"), (0.05, "TPOT target")]


def test_a_rule_label_sits_on_the_side_of_its_rule_with_room():
    """On a log axis from 1 to 1,024, a rule at 512 (past the middle, 2^5 = 32) is labelled
    on its left, one at 2 on its right: a label never runs off a phone's narrow plot."""
    df = pd.DataFrame({"batch": [1, 1024], "tps": [10.0, 100.0], "s": ["a", "a"]})
    marks = pd.DataFrame({"batch": [2, 512], "s": ["a", "a"], "label": ["low", "high"]})
    spec = charts.lines_with_marks(df, "batch", "tps", "s", "batch", "tokens/s", marks=marks,
                                   log_x=True).to_dict()
    texts = [layer for layer in spec["layer"] if layer["mark"]["type"] == "text"]
    sides = {spec["datasets"][t["data"]["name"]][0]["label"]: (t["mark"]["align"], t["mark"]["dx"])
             for t in texts}
    assert sides == {"low": ("left", 3), "high": ("right", -3)}


def test_heatmap_tilts_long_names_on_a_phone_only():
    df = pd.DataFrame({"family": ["MLA-MoE", "dense GQA"], "gpu": ["H100", "H100"],
                       "v": [1.0, 2.0]})
    spec = charts.heatmap(df, "family", "gpu", "v", "family", "GPU", "v").to_dict()
    angle = spec["layer"][0]["encoding"]["x"]["axis"]["labelAngle"]
    assert angle == {"expr": f"{charts.ON_PHONE} ? -45 : 0"}
    short = charts.heatmap(df.assign(family=["16", "32"]), "family", "gpu", "v", "b", "GPU",
                           "v").to_dict()
    assert short["layer"][0]["encoding"]["x"]["axis"]["labelAngle"] == 0


def test_heatmap_cells_never_read_minus_zero_and_whole_axes_read_with_separators():
    # −0.3 at "+.0f" is d3's "−0": the cell's text is made here, "0"; −7.2 keeps its minus sign
    df = pd.DataFrame({"tokens": [1, 5000, 1, 5000], "gpu": ["a", "a", "b", "b"],
                       "err": [-0.3, 4.6, -7.2, 0.2]})
    spec = charts.heatmap(df, "tokens", "gpu", "err", "tokens T", "GPU", "error (%)",
                          fmt="+.0f").to_dict()
    rows = spec["datasets"][next(iter(spec["datasets"]))]
    assert [r["_label"] for r in rows] == ["0", "+5", "\u22127", "0"]
    assert spec["layer"][1]["encoding"]["text"]["field"] == "_label"
    x_axis = spec["layer"][0]["encoding"]["x"]["axis"]
    assert x_axis["format"] == "," and x_axis["formatType"] == "number"  # "5,000", not "5000"
    assert "format" not in spec["layer"][0]["encoding"]["y"]["axis"]  # names stay as they are
    assert charts.cell_text(float("nan"), ".1f") == "" and charts.cell_text(-0.004, ".2f") == "0.00"


def test_lines_by_kind_use_each_kinds_colour_and_tell_series_apart_without_hue():
    df = pd.DataFrame({"variant": ["MHA", "GQA-8", "W 128", "W 4,096", "W 1,024"] * 2,
                       "attention": ["MHA", "GQA", "GQA+SWA", "GQA+SWA", "GQA+SWA"] * 2,
                       "t": [1] * 5 + [2] * 5, "gib": [float(i) for i in range(10)]})
    styles = charts.kind_styles(list(df["variant"]), list(df["attention"]))
    assert list(styles) == ["MHA", "GQA-8", "W 128", "W 4,096", "W 1,024"]  # the frame's order
    # the first series of a kind has the kind's colour, as in every other chart
    assert styles["GQA-8"][0] == charts.KIND_COLOURS["GQA"]
    assert styles["W 128"][0] == charts.KIND_COLOURS["GQA+SWA"]
    # series of one kind: each its own shade, marker and dash
    swa = [styles[v] for v in ("W 128", "W 4,096", "W 1,024")]
    for i in range(3):
        assert len({str(s[i]) for s in swa}) == 3
    line, points = charts.lines(df, "t", "gib", "variant", "t", "GiB", kind="attention").to_dict()["layer"]
    assert line["encoding"]["color"]["scale"]["range"] == [s[0] for s in styles.values()]
    assert points["encoding"]["shape"]["scale"]["range"] == [s[1] for s in styles.values()]
    assert line["encoding"]["strokeDash"]["scale"]["range"] == [s[2] for s in styles.values()]


def test_a_diverging_heatmap_is_as_deep_either_side_of_its_middle():
    # errors of −46% and +8% about 0: the scale runs −46 … +46, so +8 is a pale orange, not as
    # deep as −46's blue
    df = pd.DataFrame({"x": ["a", "b"], "y": ["g", "g"], "v": [-46.0, 8.0]})
    rect = charts.heatmap(df, "x", "y", "v", "x", "y", "v", domain_mid=0.0).to_dict()["layer"][0]
    assert rect["encoding"]["color"]["scale"]["domain"] == [-46.0, 46.0]
    ratio = charts.heatmap(df.assign(v=[0.5, 1.25]), "x", "y", "v", "x", "y", "v",
                           domain_mid=1.0).to_dict()["layer"][0]
    assert ratio["encoding"]["color"]["scale"]["domain"] == [0.5, 1.5]
