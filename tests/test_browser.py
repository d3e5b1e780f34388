"""The built book in headless Chromium with no network, as a reader sees it on a laptop and a
phone: charts and formulas render offline and fit the column, nothing scrolls sideways, no
working notes or pandas artefacts, and every widget changes its chart. Every page's reading
(``page_readings``) is taken in the background as soon as the book is built; the widget tests
use one browser, one page."""
from __future__ import annotations

import ast
import math
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from page_readings import CHROMIUM, WIDTHS, Reader, browser, pages, serve

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(),
                                reason="Debian chromium missing: `make test` installs it")


@pytest.fixture(scope="module")
def server(built_book: Path) -> Iterator[str]:
    with serve(built_book) as address:
        yield address


@pytest.fixture(scope="module")
def reader():
    with browser() as b:
        yield Reader(b)


#: Most lines of code a page may show unfolded (cells that teach: a formula, a worked instance);
#: tables, charts, glue and checks are folded (hide-input) or removed.
MAX_VISIBLE_CODE_LINES = 25

_ARTEFACTS = [re.compile(r"\d+\.0{6}\b"), re.compile(r"^-0([.,]0*)?$"), re.compile(r"\de[+-]\d\d")]
#: A bibliography label as a reader reads it: "Kwon et al., 2023a", "NVIDIA, 2024", "TildAlice, n.d.".
_AUTHOR_YEAR = re.compile(r".+, (\d{4}|n\.d\.)[a-z]?")


def test_every_page_reads_well_offline_on_a_laptop_and_a_phone(built_book, page_readings):
    """At 1,280 and 390 px: every page renders offline (charts drawn, formulas typeset, no
    error, no request leaving the machine), nothing scrolls sideways (no display formula
    either), every chart lies inside the article column, no chart text reads "−0" or is cut
    off, no inline code is split inside a word (a flag at its hyphens), no working note shows,
    no table cell
    is a pandas artefact and every bibliography label is author–year; no page shows more than
    ``MAX_VISIBLE_CODE_LINES`` lines of unfolded code, and no unfolded cell glues or asserts."""
    every = pages(built_book)
    assert any(p.startswith("chapters/") for p in every), every
    read = [(r["page"], r["width"]) for r in page_readings]
    assert read == [(rel, width) for width in WIDTHS for rel in every], "a page was not read"
    failures = []
    for reading in page_readings:
        rel, width, problems, seen = (reading[k] for k in ("page", "width", "problems", "seen"))
        where = f"{rel} at {width} px"
        if problems or seen["chartErrors"]:
            failures.append(f"{where}: {problems + seen['chartErrors']}")
        if seen["scrollWidth"] > seen["clientWidth"]:
            failures.append(f"{where}: scrolls sideways ({seen['scrollWidth']} px in "
                            f"{seen['clientWidth']})")
        if seen["wideFormulas"]:
            failures.append(f"{where}: {seen['wideFormulas']} display formulas wider than the "
                            "column (they scroll sideways)")
        left, right = seen["col"]
        for c in seen["charts"]:
            if not c["drawn"]:
                failures.append(f"{where}: chart {c['id']} not drawn")
            elif c["left"] < left - 1 or c["right"] > right + 1:
                failures.append(f"{where}: chart {c['id']} spans {c['left']:.0f}–"
                                f"{c['right']:.0f} px, outside the column {left:.0f}–{right:.0f}")
        if seen["signedZeros"] or seen["cutLabels"]:
            failures.append(f"{where}: chart text reading a signed zero "
                            f"{[(t['id'], t['text']) for t in seen['signedZeros']][:5]} or cut off "
                            f"by its chart {[(t['id'], t['text']) for t in seen['cutLabels']][:5]}")
        if seen["brokenCode"]:
            failures.append(f"{where}: inline code split inside a word {seen['brokenCode'][:5]}")
        if seen["notes"]:
            failures.append(f"{where}: working notes {seen['notes']}")
        bad = [c for c in seen["cells"] if any(p.search(c) for p in _ARTEFACTS)]
        if bad or seen["rawPandas"] or seen["blankHeads"]:
            failures.append(f"{where}: pandas artefacts {bad[:5]}, {seen['rawPandas']} raw "
                            f"DataFrame tables, {seen['blankHeads']} unnamed header cells")
        keys = [label for label in seen["citeLabels"] if not _AUTHOR_YEAR.fullmatch(label)]
        if keys:
            failures.append(f"{where}: bibliography labels that are not author–year {keys[:5]}")
        if width == 1280 and (seen["codeLines"] > MAX_VISIBLE_CODE_LINES or seen["codeChecks"]):
            failures.append(f"{rel}: {seen['codeLines']} lines of unfolded code (at most "
                            f"{MAX_VISIBLE_CODE_LINES}), {seen['codeChecks']} unfolded cells "
                            f"with glue( or assert")
        if rel == "chapters/01_per_token_kv.html" and (
                len(seen["charts"]) < 2 or seen["mathRendered"] < 2):
            failures.append(f"{where}: chapter 1 lost its charts or its formulas")
    assert not failures, "\n".join(failures)


# --- widgets respond --------------------------------------------------------------------------

def _svg(chart) -> str:
    """The markup of a rendered chart's SVG (marks, axes and text)."""
    return chart.locator("svg").first.evaluate("e => e.outerHTML")


def _svg_text(chart) -> list[str]:
    """Every text element of a rendered chart's SVG, in document order."""
    return chart.locator("svg").first.evaluate(
        "e => Array.from(e.querySelectorAll('text')).map(t => t.textContent)")


def _svg_cost_geometry(chart) -> list[str]:
    """Where a rendered chart draws its text ("1@translate(-7,253)") and its lines and areas:
    a price change on a log axis moves either the tick labels or the marks against them."""
    return chart.locator("svg").first.evaluate(
        "e => Array.from(e.querySelectorAll('text'))"
        ".map(t => t.textContent + '@' + (t.getAttribute('transform') || ''))"
        ".concat(Array.from(e.querySelectorAll('g.mark-line path, g.mark-area path'))"
        ".map(p => p.getAttribute('d')))")


def _await_change(page, chart_id: str, before: str) -> str:
    page.wait_for_function(
        "([id, before]) => document.querySelector('#' + id + ' svg').outerHTML !== before",
        arg=[chart_id, before], timeout=10_000)
    return page.locator(f"#{chart_id}").locator("svg").first.evaluate("e => e.outerHTML")


def _wiggle(page, chart) -> list[str]:
    """Change every select and range input bound to ``chart``; return the controls that did
    not change the drawing."""
    chart_id = chart.get_attribute("id")
    dead = []
    for control in chart.locator(".vega-bindings select, .vega-bindings input[type=range]").all():
        name = control.get_attribute("name")
        before = _svg(chart)
        if control.evaluate("e => e.tagName") == "SELECT":
            values = control.locator("option").evaluate_all("os => os.map(o => o.value)")
            current = control.input_value()
            control.select_option(next(v for v in values if v != current))
        else:
            low, high = float(control.get_attribute("min")), float(control.get_attribute("max"))
            target = low + 0.8 * (high - low) if float(control.input_value()) < (low + high) / 2 \
                else low + 0.2 * (high - low)
            control.fill(f"{target:.2f}")
        try:
            _await_change(page, chart_id, before)
        except Exception:  # noqa: BLE001 - report which control is dead, not a timeout
            dead.append(str(name))
    return dead


def test_every_widget_changes_its_chart(built_book, server, reader):
    seen = 0
    with_widgets = [rel for rel in pages(built_book)  # a spec with bound params
                    if '"bind":{' in (built_book / rel).read_text(encoding="utf-8")]
    for rel in with_widgets:
        page = reader.open(f"{server}/{rel}")
        for chart in page.locator("div.kvlib-chart:has(.vega-bindings select, .vega-bindings input)").all():
            seen += 1
            assert not _wiggle(page, chart), f"{rel}: controls that change nothing"
        assert not reader.problems, f"{rel}: {reader.problems}"
    assert seen >= 1, "chapter 4 has a chart with widgets (the landing calculator: below)"


def _number(text: str) -> float:
    """A figure as the calculator shows it ("$0.667", "1,210 s") as a number."""
    return float(text.replace("$", "").replace(",", "").split()[0])


def _tiles(calc) -> dict[str, float]:
    return {t.get_attribute("data-kc"): _number(t.locator(".kc-value").inner_text())
            for t in calc.locator(".kc-tile").all()}


def _card_text(calc) -> str:
    return calc.locator(".kc-card").inner_text()


def _price(calc) -> float:
    """The price the calculator uses, as it shows it ($ per GPU-hour, to the cent)."""
    return _number(calc.locator(".kc-price-value").inner_text())


def _pick(calc, name: str, label: str) -> None:
    """Choose the option whose text starts with ``label`` in the control ``name``."""
    control = calc.locator(f"select[name={name}]")
    texts = control.locator("option").all_inner_texts()
    control.select_option(index=next(i for i, t in enumerate(texts) if t.startswith(label)))


def test_what_to_buy_fits_a_laptop_and_a_phone(built_book, server, reader):
    """The "What should I buy" table fits its box without scrolling sideways at 1,280 and at
    390 px, where it shows its deciding column, $ per 1M output tokens (header and every
    cell), leaves out its wide-only columns and says which."""
    from kvlib.report import answer

    deciding = answer.BUY_COLUMNS["output_cost_slow"]
    left_out = [answer.BUY_COLUMNS["requests"], answer.BUY_COLUMNS["gpu_price"]]
    for width in (1280, 390):
        page = reader.open(f"{server}/chapters/00_answer.html", width)
        seen = page.evaluate("""label => {
          const th = Array.from(document.querySelectorAll('table.kvlib-table thead th'))
            .find(t => t.dataset.column === label);
          if (!th) { return null; }
          const wrap = th.closest('div.kvlib-table-wrap'), box = wrap.getBoundingClientRect();
          const cells = [th, ...th.closest('table').querySelectorAll(`td[data-column="${label}"]`)];
          const note = wrap.querySelector('.kvlib-table-narrow-note');
          return {box: [box.left, box.right], sideways: wrap.scrollWidth - wrap.clientWidth,
                  note: note && note.offsetParent ? note.textContent : null,
                  shown: Array.from(wrap.querySelectorAll('thead th')).filter(t => t.offsetParent)
                    .map(t => t.dataset.column),
                  cells: cells.map(c => { const b = c.getBoundingClientRect(); return [b.left, b.right]; })};
        }""", deciding)
        assert seen is not None, f"no table with a {deciding!r} column on the landing page"
        left, right = seen["box"]
        assert len(seen["cells"]) > 1
        hidden = [c for c in seen["cells"] if c[0] < left - 1 or c[1] > right + 1]
        assert not hidden, f"{len(hidden)} cells of {deciding!r} outside the table's box at {width} px"
        assert seen["sideways"] <= 1, f"the table scrolls {seen['sideways']} px sideways at {width} px"
        if width == 390:
            assert not set(left_out) & set(seen["shown"]) and seen["note"], seen
            assert all(label in seen["note"] for label in left_out), seen["note"]
        else:
            assert set(left_out) <= set(seen["shown"]) and seen["note"] is None, seen


def _requests_tile_says_how_many_run(calc, row) -> None:
    """The requests tile gives what the KV pool holds and, where fewer run at once (the
    engine's running cap or its step budget), how many do."""
    tile = calc.locator("[data-kc=requests]")
    assert tile.locator(".kc-label").inner_text() == "requests the KV pool holds"
    fewer = row["batch"] < math.floor(row["max_concurrency"])
    assert tile.locator(".kc-range").all_inner_texts() == (
        [f"{int(row['batch']):,} run at once, as the engine is started"] if fewer else [])


def test_landing_calculator_prices_the_gpu_and_answers_every_choice(built_book, server, reader,
                                                                     executed_book):
    """The calculator opens on kvlib's answer for the starting case at the GPU's market price;
    the price follows the GPU and the kind of offer; every other control changes the figures;
    a case that does not fit says why and what would; the CSV downloads resolve offline."""
    from kvlib.fit import calibrate
    from kvlib.report import answer

    page = reader.open(f"{server}/chapters/00_answer.html")
    calc = page.locator("div.kvlib-calculator")
    row = answer.answer_grid(["llama-3.1-8b"], ["h100-sxm"], lengths=[8192],
                             requests=[(7168, 1024)]).query(
        "weights == 'bf16' and max_model_len == 8192").iloc[0]
    price = answer.market_price("h100-sxm")  # $3.99, the median of ten providers' dated offers
    assert _price(calc) == price
    shown = _tiles(calc)
    expected = {"gpus": 1, "requests": row["max_concurrency"], "tps": row["tokens_per_s"],
                "user": row["per_user_tokens_per_s"], "ttft": row["ttft_s"],
                "output": row["output_cost"] * price, "input": row["input_cost"] * price}
    for key, value in expected.items():  # three significant digits on the page
        assert shown[key] == pytest.approx(value, rel=6e-3), (key, shown[key], value)
    _requests_tile_says_how_many_run(calc, row)
    offer = answer.market_prices().set_index(["gpu", "kind"]).loc[("h100-sxm", "on-demand")]
    assert offer["basis"] in _card_text(calc)  # "the median of 10 dated on-demand offers ($2.99–…)"
    # the speed tiles carry the held-out band under the model's figure, TTFT its caveat
    assert calc.locator("[data-kc=tps] .kc-range").inner_text().startswith("error band ")
    assert "a lower bound" in calc.locator("[data-kc=ttft]").inner_text()
    # and what runs measured with as many requests in flight took: the model's TTFT ÷ (1 +
    # the median error of its batch band)
    band = calibrate.ttft_errors().set_index("batch_range").loc[calibrate.batch_range(
        int(row["batch"]))]
    said = re.fullmatch(r"runs measured like this took about ([\d.]+) s \(the median miss "
                        r"applied\)", calc.locator("[data-kc=ttft] .kc-range").inner_text())
    assert said and math.isclose(float(said[1]), row["ttft_s"] / (1 + band["median"]),
                                 rel_tol=0.01)  # the page's figures carry 3-4 digits
    assert "0.92" in calc.locator("select[name=utilization]").locator("option").all_inner_texts()
    # under the figures, the command that starts the case; the same case under SGLang at its
    # default fraction (the menu then offers only that), and TensorRT-LLM where it does not run
    assert calc.locator(".kc-launch-command").inner_text() == row["launch"]
    # speculative decoding with the model's measured EAGLE-3 chain, and the command with it
    spec = calc.locator(".kc-spec").inner_text()
    assert spec.startswith("With EAGLE-3 (k = 4, mean acceptance length 3.08 measured in vLLM")
    assert f"(\u00d7{row['spec_speedup']:.2f};" in spec and "upper bound" in spec
    assert calc.locator(".kc-spec-command").inner_text() == row["spec_launch"]
    sgl = answer.answer_grid(["llama-3.1-8b"], ["h100-sxm"], lengths=[8192],
                             requests=[(7168, 1024)], utilizations=[None], engine="sglang").query(
        "weights == 'bf16' and max_model_len == 8192").iloc[0]
    _pick(calc, "engine", "SGLang")
    assert calc.locator("select[name=utilization]").is_disabled()
    assert _tiles(calc)["requests"] == pytest.approx(sgl["max_concurrency"], rel=6e-3)
    _requests_tile_says_how_many_run(calc, sgl)
    assert calc.locator(".kc-launch-command").inner_text() == sgl["launch"]
    assert "not priced: kvlib sizes a draft's KV" in calc.locator(".kc-spec").inner_text()
    _pick(calc, "gpu", "AMD Instinct MI300X")
    _pick(calc, "engine", "TensorRT-LLM")
    assert "runs on NVIDIA GPUs only" in _card_text(calc)
    _pick(calc, "gpu", "NVIDIA H100 SXM5")
    _pick(calc, "engine", "vLLM")
    assert _tiles(calc) == shown

    # at the starting latency target the page shows the chapter's sized fleet; the day's price
    # scales with the share at peak; more GPUs per replica redraw both, and the frontier marks it
    import nbformat
    cells = nbformat.read(executed_book / "00_answer.ipynb", as_version=4).cells
    glued = {o["metadata"]["scrapbook"]["name"]: o["data"]["application/papermill.record/text/plain"]
             for c in cells for o in c.get("outputs", []) if "scrapbook" in o.get("metadata", {})}
    for key, name in (("slo_rate", "l_rate"), ("slo_replicas", "l_replicas"),
                      ("slo_gpus", "l_gpus"), ("slo_hour", "l_hour"), ("slo_output", "l_cost")):
        # a figure the page writes as its calculator does arrives as text ("20.0", "1,399")
        value = float(str(ast.literal_eval(glued[name])).replace(",", ""))
        assert shown[key] == pytest.approx(value, rel=6e-3), (key, shown[key])
    assert "TTFT is a floor" in calc.locator(".kc-slo-error").inner_text()
    _pick(calc, "duty", "25%")
    assert _tiles(calc)["slo_output"] == pytest.approx(4 * shown["slo_output"], rel=6e-3)
    assert calc.locator(".kc-frontier circle").count() == 4  # 1, 2, 4 and 8 H100s
    _pick(calc, "n_gpus", "4")
    assert _tiles(calc)["gpus"] == 4 and "were simulated for fewer cases" in _card_text(calc)
    _pick(calc, "n_gpus", "1")
    _pick(calc, "duty", "100%")

    # the price follows the GPU (L4: the median of its two dated offers, $0.75) and the kind
    _pick(calc, "gpu", "NVIDIA L4")
    assert _price(calc) == answer.market_price("l4")
    assert "Google Cloud, g2-standard-4 (1x L4) (2026-03): $0.70" in _card_text(calc)
    _pick(calc, "gpu", "NVIDIA H100 SXM5")
    _pick(calc, "kind", "spot")
    assert _price(calc) == pytest.approx(answer.market_price("h100-sxm", "spot"), abs=0.005)

    # every other choice changes what the card says
    for name, label in (("weights", "fp8"), ("kv_dtype", "fp8"), ("utilization", "0.95"),
                        ("max_model_len", "131,072"), ("prompt", "31,744"), ("output", "4,096")):
        before = _card_text(calc)
        _pick(calc, name, label)
        assert _card_text(calc) != before, f"{name} → {label} changed nothing"
    slider = calc.locator("input[name=price]")
    before = _tiles(calc)["output"]
    slider.fill("6")
    assert _tiles(calc)["output"] == pytest.approx(before * 6 / answer.market_price(
        "h100-sxm", "spot"), rel=1e-2)  # $/token is linear in the price
    _pick(calc, "gpu", "NVIDIA H200")  # a price the reader set survives a change of GPU
    assert _price(calc) == 6 and "Your price: $6.00" in _card_text(calc)
    _pick(calc, "gpu", "NVIDIA H100 SXM5")

    # one request at a time (70B fp8, a 130,048-token prompt on two H100s): it pays for its
    # own prompt, never $0
    _pick(calc, "model", "Llama-3.1-70B")
    assert "no measured acceptance rate for this model" in _card_text(calc)
    _pick(calc, "weights", "fp8")
    _pick(calc, "kv_dtype", "bf16")
    _pick(calc, "utilization", "0.90")
    _pick(calc, "output", "1,024")
    _pick(calc, "prompt", "130,048")
    assert _tiles(calc)["input"] > 0 and "1 request at a time" in _card_text(calc)

    # a case that no group of eight holds: why, what would, and the same case on two nodes
    # with the command that starts it
    _pick(calc, "model", "Llama-3.1-405B")
    _pick(calc, "weights", "bf16")
    text = _card_text(calc)
    assert ("Not on one node of up to eight GPUs (weights): the weights alone, 94.5 GiB per GPU "
            "on 8 GPUs") in text
    assert "Would fit with fp8 weights" in text and "On two nodes of eight (16 × H100" in text
    assert "--pipeline-parallel-size 2" in calc.locator(".kc-launch-command").inner_text()
    # one that does not fit at all, with its reason and no command
    _pick(calc, "gpu", "NVIDIA L4")
    text = _card_text(calc)
    assert "Does not fit (weights)" in text and not calc.locator(".kc-launch-command").count()
    _pick(calc, "gpu", "NVIDIA H100 SXM5")
    assert not calc.locator(".kc-dp").count(), "data-parallel ranks only for an MLA MoE"
    # DeepSeek-V3 (MLA, experts) on eight H200s: also as eight data-parallel ranks, with the
    # requests the calculator data holds for that case, the speed flagged, and the command
    _pick(calc, "model", "DeepSeek-V3")
    _pick(calc, "weights", "fp8")
    _pick(calc, "gpu", "NVIDIA H200")
    _pick(calc, "prompt", "7,168")
    dp_line = calc.locator(".kc-dp").inner_text()
    assert "eight ranks of one GPU" in dp_line and "Read the speed as a ceiling" in dp_line
    assert ("--data-parallel-size 8 --enable-expert-parallel"
            in calc.locator(".kc-dp-command").inner_text())
    assert not reader.problems

    # the downloads: files next to the book, with the expected header
    links = {a.get_attribute("download"): a.get_attribute("href")
             for a in page.locator("a.kvlib-download").all()}
    assert set(links) == {"answer_grid.csv", "two_nodes.csv", "claims.csv"}
    for name, header in (("answer_grid.csv", ",".join(answer.GRID_COLUMNS)),
                         ("claims.csv", "id,claim,source,claimed,recomputed,unit,verdict")):
        got = page.request.get(f"{server}/_static/downloads/{name}")
        assert links[name] == f"../_static/downloads/{name}" and got.ok, name
        assert got.text().splitlines()[0].startswith(header), name


def test_chapter_four_cost_chart_follows_price_and_gpu(built_book, server, reader):
    page = reader.open(f"{server}/chapters/04_cost.html")
    chart = page.locator("div.kvlib-chart:has(input[name=price])").first
    chart_id = chart.get_attribute("id")
    ticks = _svg_cost_geometry(chart)
    before = _svg(chart)
    slider = chart.locator("input[name=price]")
    slider.fill(f"{float(slider.input_value()) * 3:.2f}")  # 3× the price: 3× every $ value
    _await_change(page, chart_id, before)
    assert _svg_cost_geometry(chart) != ticks, "the cost axis did not move with the price"
    gpu = chart.locator(".vega-bindings select").first
    options = gpu.locator("option").evaluate_all("os => os.map(o => o.value)")
    assert options[0] == "h100-sxm" and len(options) >= 5, "the GPU picker opens on the H100"
    before = _svg(chart)
    gpu.select_option(index=1)
    _await_change(page, chart_id, before)
    assert not reader.problems
