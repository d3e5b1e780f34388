"""Cross-check kvlib against the KV cache objects Hugging Face ``transformers`` builds.

For a registry model, build the transformers model from its published config on the ``meta``
device (no weights, no memory), run one forward pass over ``T`` meta token ids, and add up
``numel × element_size`` of every tensor in the returned cache. Compare with
:meth:`kvlib.Model.kv_bytes` for the same config.

The two are not expected to agree everywhere, and the differences are named, not hidden:

* **recurrent layers** (Mamba-2, Gated DeltaNet): transformers keeps ``conv_kernel`` taps of
  convolution state where vLLM and kvlib keep ``conv_kernel − 1``, and keeps the recurrent
  state in fp32 while kvlib defaults to the model's dtype. :func:`transformers_convention_bytes`
  recomputes kvlib's own geometry under those two conventions; the measurement must match it
  exactly.
* **sliding windows and chunks**: the cache tensor of a windowed layer holds ``W − 1`` tokens,
  like kvlib (a Llama-4 chunked layer is kept as a window of ``chunk − 1``), but right after a
  prefill it is a view into the freshly computed keys and values of all ``T`` tokens, so the
  memory behind it is ``T`` tokens until the next step replaces it (``window_storage_bytes``).
* **DeepSeek-V3.2's indexer keys**: transformers keeps them in the model's dtype, vLLM (and
  kvlib) in fp8 with a scale.

Any other disagreement is a kvlib bug. The measurement runs once, in
``tests/test_crosscheck.py``, which writes ``data/validation/crosscheck.csv`` (:func:`load_table`)
and fails when the file no longer matches kvlib (:func:`stale_rows`) or transformers. ``torch``
and ``transformers`` are imported only when a measurement runs (pinned in pyproject's
``[crosscheck]`` extra: torch 2.13.0 CPU, transformers 5.24.0).
"""
from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from .hf_config import transformers_config
from .model import Model
from .registry import model_record
from ..core.units import elements_to_bytes
from ..core.checks import positive_integer

@dataclass(frozen=True)
class Case:
    """One registry model the book cross-checks: what it exercises, the layers kept (the first
    ``n_layers``, which hold every layer kind with its true geometry; None: all) and the prefill
    lengths measured (tokens)."""

    architecture: str
    n_layers: int | None
    tokens: tuple[int, ...] = (1, 300, 5000)


#: The cross-checked models, one per cache layout. Prefills of 5,000 tokens pass every window;
#: Llama-4's 8,192-token chunk needs 9,000. Mamba-1 models stop at 300 tokens: transformers'
#: pure-torch selective scan (no CUDA kernel on CPU) loops over every token.
CASES: dict[str, Case] = {
    "llama-3.1-8b": Case("GQA, full attention", 2),
    "llama-2-7b": Case("MHA", 2),
    "opt-13b": Case("MHA, learned positions", 2),
    "falcon-7b": Case("MQA (RW config)", 2),
    "bloomz-mt": Case("MHA, n_embed spelling, ALiBi", 2),
    "mistral-7b-v0.1": Case("every layer windowed (4,096)", 2),
    "gemma-2-9b": Case("local/global alternation (4,096)", 2),
    "gemma-3-27b": Case("5 local : 1 global (1,024), pattern by convention", 6),
    "gpt-oss-20b": Case("1 local : 1 global (128)", 2),
    "llama-4-scout-17b-16e-instruct": Case("3 chunked (8,192) : 1 full", 4, (1, 300, 9000)),
    "deepseek-v2": Case("MLA", 2),
    "deepseek-v3": Case("MLA, dense then MoE layers", 4),
    "deepseek-v3.2": Case("MLA + indexer keys", 2),
    "qwen3.5-35b-a3b": Case("Gated DeltaNet hybrid (3:1), layer_types", 4),
    "qwen3-next-80b-a3b": Case("Gated DeltaNet hybrid, full_attention_interval", 4),
    "nemotron-3-nano-30b-a3b": Case("Mamba-2 hybrid, MoE", 7),
    "jamba-v0.1": Case("Mamba-1 with attention every 8th layer", 5, (1, 300)),
    "falcon-mamba-7b": Case("pure Mamba-1 (state only)", 2, (1, 300)),
}
#: Display label per cross-checked slug (what each case exercises).
ARCHITECTURES: dict[str, str] = {slug: case.architecture for slug, case in CASES.items()}
#: The committed measurement: one row per (case, prefill length); written by
#: ``tests/test_crosscheck.py`` with the torch and transformers versions it ran on.
RESULT_FILE = "validation/crosscheck.csv"


def hf_config_dict(slug: str, n_layers: int | None = None) -> dict[str, Any]:
    """The registry config of ``slug`` as transformers reads it, optionally cut to ``n_layers``
    (:func:`kvlib.model.hf_config.transformers_config`)."""
    try:
        return transformers_config(model_record(slug)["config"], n_layers)
    except ValueError as exc:
        raise ValueError(f"{slug}: {exc}") from None


def kvlib_model(slug: str, n_layers: int | None = None) -> Model:
    """kvlib's Model for exactly the config transformers is given."""
    name = model_record(slug).get("name", slug)
    return Model.from_hf_config(hf_config_dict(slug, n_layers), name=name)


def _import_torch() -> tuple[Any, Any]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tqdm's "IProgress not found" in notebooks
            import torch
            import transformers
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("the cross-check needs torch and transformers: pip install "
                          "'kvlib[crosscheck]' (torch==2.13.0, transformers==5.24.0)") from exc
    return torch, transformers


_TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def build_transformers_model(slug: str, n_layers: int | None = None) -> Any:
    """The transformers causal LM for ``slug`` on the meta device, in the config's dtype."""
    return transformers_model(hf_config_dict(slug, n_layers), kvlib_model(slug, n_layers).dtype)


def transformers_model(config: Mapping[str, Any], dtype: str | None = None) -> Any:
    """The transformers causal LM a config (as transformers reads it) describes, on the meta
    device, in ``dtype`` (default bf16)."""
    torch, transformers = _import_torch()
    config = dict(config)
    model_type = config.pop("model_type")
    hf_config = transformers.AutoConfig.for_model(model_type, **config)
    dtype = getattr(torch, _TORCH_DTYPES[dtype or "bf16"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.device("meta"):
            return transformers.AutoModelForCausalLM.from_config(hf_config, dtype=dtype)


def _cache_tensors(layer: Any) -> list[Any]:
    """Every tensor a cache layer holds in its public attributes (keys, values, states)."""
    import torch

    found: list[Any] = []

    def walk(value: Any) -> None:
        if isinstance(value, torch.Tensor):
            found.append(value)
        elif isinstance(value, Mapping):
            for item in value.values():
                walk(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item)

    for name, value in vars(layer).items():
        if not name.startswith("_"):
            walk(value)
    return found


def measure_cache(hf_model: Any, n_tokens: int) -> tuple[int, int]:
    """Run a prefill of ``n_tokens`` meta tokens; return (cache tensor bytes, window storage bytes).

    Tensor bytes are ``numel × element_size`` over every cache tensor; window storage bytes are
    the bytes of the memory behind the sliding layers' tensors (views count their whole base).
    """
    torch, transformers = _import_torch()
    n_tokens = positive_integer("n_tokens", n_tokens)
    ids = torch.zeros((1, n_tokens), dtype=torch.long, device="meta")
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            cache = hf_model(input_ids=ids, use_cache=True).past_key_values
    finally:
        transformers.logging.set_verbosity(verbosity)
    tensor_bytes = window_storage = 0
    for layer in cache.layers:
        tensors = _cache_tensors(layer)
        tensor_bytes += sum(t.numel() * t.element_size() for t in tensors)
        if getattr(layer, "is_sliding", False):
            window_storage += sum(t.untyped_storage().nbytes() for t in tensors)
    return tensor_bytes, window_storage


def transformers_convention_bytes(model: Model, n_tokens: int, dtype: str | None = None) -> int:
    """kvlib's geometry counted the way transformers 5.x stores it after a prefill.

    Per-token layers hold the tokens :meth:`Model.kv_bytes` holds, every element in ``dtype``
    (so DeepSeek-V3.2's indexer keys take 2 bytes each, not vLLM's fp8 + scale); recurrent
    layers keep ``conv_kernel`` convolution taps (not ``conv_kernel − 1``) in ``dtype`` and the
    recurrent state in fp32.
    """
    dtype = dtype or model.dtype or "bf16"
    per_token = sum(elements_to_bytes(layer.elements_per_token(), dtype)
                    * layer.tokens_held(n_tokens) for layer in model.layers)
    state = sum(layer.state_bytes(conv_dtype=dtype, ssm_dtype="fp32", all_conv_taps=True)
                for layer in model.layers) if n_tokens > 0 else 0
    return per_token + state


#: Cache kinds whose tensor transformers keeps as a window (a sliding window, or a Llama-4 chunk
#: kept as a window of chunk − 1 tokens).
_WINDOWED = ("sliding", "chunked")


def window_view_bytes(model: Model, n_tokens: int, dtype: str | None = None) -> int:
    """Bytes behind the windowed layers right after a prefill of ``n_tokens``: all T tokens."""
    dtype = dtype or model.dtype or "bf16"
    return sum(elements_to_bytes(layer.elements_per_token(), dtype) * n_tokens
               for layer in model.layers if layer.cache_kind in _WINDOWED)


def explain(model: Model, n_tokens: int) -> str:
    """Why transformers' bytes differ from kvlib's for this model at ``n_tokens`` (or agree)."""
    counts = model.layer_counts()
    notes = []
    recurrent = [lay for lay in model.layers if lay.cache_kind == "state"]
    if recurrent:
        k = recurrent[0].conv_kernel
        notes.append(f"recurrent state: transformers keeps {k} conv taps (kvlib, vLLM: {k - 1}) "
                     "and the recurrent state in fp32 (kvlib: the config's SSM dtype)")
    spans = [lay.span for lay in model.layers if lay.cache_kind in _WINDOWED]
    if spans:
        span = max(spans)
        what = "window" if counts.get("sliding") else "chunk"
        if n_tokens >= span - 1:
            notes.append(f"{what}: the tensor holds {span - 1:,} tokens like kvlib; after "
                         f"prefill it views all {n_tokens:,}")
        else:
            notes.append(f"{what} not yet full: all tokens kept")
    if counts.get("mla"):
        notes.append("MLA: transformers 5.x caches the latent + RoPE key, as kvlib")
    if counts.get("indexer"):
        notes.append("indexer keys: transformers keeps them in bf16 (2 B per value), vLLM in "
                     "fp8 with one fp32 scale per 128 values")
    return "; ".join(notes) if notes else "same layout"


@dataclass(frozen=True)
class CrossCheck:
    """One measurement: transformers' cache bytes against kvlib's, and why they differ."""

    slug: str
    model: str
    architecture: str
    layers: int
    n_tokens: int
    transformers_bytes: int
    kvlib_bytes: int
    expected_bytes: int
    window_storage_bytes: int
    expected_window_storage_bytes: int
    explanation: str

    @property
    def ratio(self) -> float:
        """transformers' bytes ÷ kvlib's."""
        return self.transformers_bytes / self.kvlib_bytes

    @property
    def explained(self) -> bool:
        """True when the measurement equals kvlib's geometry under transformers' conventions."""
        return (self.transformers_bytes == self.expected_bytes
                and self.window_storage_bytes == self.expected_window_storage_bytes)


def cross_check(slug: str, token_counts: Sequence[int] = (1, 100, 5000),
                n_layers: int | None = None) -> list[CrossCheck]:
    """Measure ``slug`` at every ``token_counts`` (one model build, one prefill per count)."""
    return _measure(slug, kvlib_model(slug, n_layers), build_transformers_model(slug, n_layers),
                    token_counts)


def cross_check_config(config: Mapping[str, Any], name: str,
                       token_counts: Sequence[int] = (1, 100, 5000),
                       n_layers: int | None = None) -> list[CrossCheck]:
    """Measure a config that is not in the registry (a corpus config, say) the same way: its
    first ``n_layers`` layers, built by transformers on the meta device, against kvlib."""
    config = transformers_config(config, n_layers)
    model = Model.from_hf_config(config, name=name)
    return _measure(name, model, transformers_model(config, model.dtype), token_counts)


def _measure(slug: str, model: Model, hf_model: Any,
             token_counts: Sequence[int]) -> list[CrossCheck]:
    rows = []
    for n_tokens in token_counts:
        measured, storage = measure_cache(hf_model, n_tokens)
        rows.append(CrossCheck(
            slug=slug, model=model.name, architecture=ARCHITECTURES.get(slug, model.attention),
            layers=model.n_layers, n_tokens=n_tokens, transformers_bytes=measured,
            kvlib_bytes=model.kv_bytes(n_tokens, model.dtype or "bf16"),
            expected_bytes=transformers_convention_bytes(model, n_tokens),
            window_storage_bytes=storage,
            expected_window_storage_bytes=window_view_bytes(model, n_tokens),
            explanation=explain(model, n_tokens)))
    return rows


def cross_check_table(slugs: Iterable[str] = tuple(CASES),
                      token_counts: Sequence[int] | None = None,
                      n_layers: Mapping[str, int] | None = None) -> Any:
    """A DataFrame with one row per (model, T): both byte counts, their ratio, the explanation.

    By default each slug is measured as its :data:`CASES` entry says (layers kept, prefill
    lengths); ``token_counts`` and ``n_layers`` override that.
    """
    import pandas as pd

    rows = []
    for slug in slugs:
        case = CASES.get(slug, Case("", None))
        tokens = case.tokens if token_counts is None else token_counts
        layers = case.n_layers if n_layers is None else n_layers.get(slug)
        for check in cross_check(slug, tokens, layers):
            rows.append({**asdict(check), "ratio": check.ratio, "explained": check.explained})
    return pd.DataFrame(rows)


def versions() -> dict[str, str]:
    """The torch and transformers versions a measurement runs on."""
    torch, transformers = _import_torch()
    return {"torch": torch.__version__.split("+")[0], "transformers": transformers.__version__}


def measured_table() -> Any:
    """Every case of :data:`CASES` measured now, with the library versions (needs torch)."""
    table = cross_check_table()
    for key, value in versions().items():
        table[key] = value
    return table


def _result_path() -> Any:
    from .registry import data_dir

    return data_dir() / RESULT_FILE


def load_table() -> Any:
    """The committed measurement (``data/validation/crosscheck.csv``), no torch needed."""
    import pandas as pd

    from ..core.data import csv_path

    path = _result_path()
    if not path.is_file():
        raise KeyError(f"no cross-check measurement at {path}: run tests/test_crosscheck.py "
                       "with torch and transformers installed to write it")
    return pd.read_csv(csv_path(RESULT_FILE), dtype={"torch": str, "transformers": str})


def write_table(table: Any) -> None:
    """Write a measurement as the committed result file."""
    table.to_csv(_result_path(), index=False)


def stale_rows(table: Any) -> list[str]:
    """Rows of a committed measurement whose kvlib columns no longer match kvlib: each case
    is recomputed from the current registry and code (no torch needed)."""
    stale = []
    for slug, rows in table.groupby("slug", sort=False):
        case = CASES.get(slug)
        if case is None:
            stale.append(f"{slug}: no longer a cross-check case")
            continue
        model = kvlib_model(slug, case.n_layers)
        if tuple(rows["n_tokens"]) != case.tokens:
            stale.append(f"{slug}: measured at {tuple(rows['n_tokens'])}, case says "
                         f"{case.tokens}")
            continue
        for row in rows.itertuples():
            now = (model.kv_bytes(row.n_tokens, model.dtype or "bf16"),
                   transformers_convention_bytes(model, row.n_tokens),
                   window_view_bytes(model, row.n_tokens), explain(model, row.n_tokens))
            then = (row.kvlib_bytes, row.expected_bytes, row.expected_window_storage_bytes,
                    row.explanation)
            if now != then:
                stale.append(f"{slug} at {row.n_tokens:,} tokens: kvlib now gives {now[:3]}, "
                             f"the file {then[:3]}")
    missing = sorted(set(CASES) - set(table["slug"]))
    stale.extend(f"{slug}: not measured" for slug in missing)
    return stale


def error_cells(table: Any) -> Any:
    """One cell per measurement of a cross-check table (``load_table``): model, n_tokens and
    error_pct = 100 × (transformers_bytes ÷ kvlib_bytes − 1), the heatmap of chapter 2. E.g.
    Qwen3-Next at one token: 1.9695× → +96.95%."""
    import pandas as pd

    return pd.DataFrame({"model": table["model"], "n_tokens": table["n_tokens"].astype(int),
                         "error_pct": 100 * (table["transformers_bytes"] / table["kvlib_bytes"] - 1)})
