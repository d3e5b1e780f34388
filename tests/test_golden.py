"""The house refactor (issue 18) changed no public number: the grid of ``golden_results`` (pools,
decode and prefill steps, serving points, prefix costs, every recheck verdict across registry
models, GPUs, TP degrees and weight and KV formats) equals the file written before it."""
import json

from golden_results import GOLDEN, public_results


def test_public_results_unchanged() -> None:
    expected = json.loads(GOLDEN.read_text())
    got = json.loads(json.dumps(public_results(), sort_keys=True))
    assert got.keys() == expected.keys()
    changed = {k: (expected[k], got[k]) for k in expected if got[k] != expected[k]}
    assert not changed, f"{len(changed)} public results changed, e.g. {list(changed.items())[:3]}"
