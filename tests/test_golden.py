"""The house refactor (issue 18) changed no public number: the grid of ``golden_results`` (pools,
decode and prefill steps, serving points, prefix costs, every recheck verdict across registry
models, GPUs, TP degrees and weight and KV formats) equals the file written before it."""
import json
import math

from golden_results import GOLDEN


def _same(a, b) -> bool:
    """Equal, floats to 1e-9 relative (the refactor may reorder a sum, never change a figure)."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        return (isinstance(a, (int, float)) and isinstance(b, (int, float))
                and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-15))
    return a == b


def test_public_results_unchanged(golden_sample) -> None:
    """The sample (``CHECKED_EVERY``), computed in the background by ``golden_results.py
    --sample`` while the other tests run, equals the file."""
    expected = json.loads(GOLDEN.read_text())
    got = json.loads(golden_sample.read_text())
    assert got.keys() <= expected.keys()
    assert {k for k in expected if not k.startswith(("decode/", "prefill/", "serve/"))} <= got.keys()
    changed = {k: (expected[k], got[k]) for k in got if not _same(got[k], expected[k])}
    assert not changed, f"{len(changed)} public results changed, e.g. {list(changed.items())[:3]}"
