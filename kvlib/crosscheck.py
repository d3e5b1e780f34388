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
* **sliding windows**: the cache tensor of a windowed layer holds ``W − 1`` tokens, like kvlib,
  but right after a prefill it is a view into the freshly computed keys and values of all ``T``
  tokens, so the memory behind it is ``T`` tokens until the next step replaces it
  (``window_storage_bytes``).

Any other disagreement is a kvlib bug. ``torch`` and ``transformers`` are imported only when a
measurement runs (pinned in pyproject's ``[crosscheck]`` extra: torch 2.13.0 CPU,
transformers 5.24.0).
"""
from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from .hf_config import transformers_config
from .model import Model
from .registry import model_record

#: Registry models the book cross-checks: one per cache layout (slug → what it exercises).
ARCHITECTURES: dict[str, str] = {
    "llama-3.1-8b": "GQA, full attention",
    "llama-2-7b": "MHA",
    "opt-13b": "MHA, learned positions",
    "falcon-7b": "MQA (RW config)",
    "mistral-7b-v0.1": "every layer windowed (4,096)",
    "gemma-2-9b": "local/global alternation (4,096)",
    "gemma-3-27b": "5 local : 1 global (1,024), pattern by convention",
    "gpt-oss-20b": "1 local : 1 global (128)",
    "deepseek-v2": "MLA, 60 layers",
    "deepseek-v3": "MLA, 61 layers",
    "qwen3.5-35b-a3b": "Gated DeltaNet hybrid (3:1)",
    "qwen3-next-80b-a3b": "Gated DeltaNet hybrid, full_attention_interval",
    "nemotron-3-nano-30b-a3b": "Mamba-2 hybrid",
}

def hf_config_dict(slug: str, n_layers: int | None = None) -> dict[str, Any]:
    """The registry config of ``slug`` as transformers reads it, optionally cut to ``n_layers``
    (:func:`kvlib.hf_config.transformers_config`)."""
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
    torch, transformers = _import_torch()
    config = hf_config_dict(slug, n_layers)
    model_type = config.pop("model_type")
    hf_config = transformers.AutoConfig.for_model(model_type, **config)
    dtype = getattr(torch, _TORCH_DTYPES[kvlib_model(slug, n_layers).dtype or "bf16"])
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
    if isinstance(n_tokens, bool) or not isinstance(n_tokens, int) or n_tokens <= 0:
        raise ValueError(f"n_tokens must be a positive integer, got {n_tokens!r}")
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

    Per-token layers exactly as :meth:`Model.kv_bytes`; recurrent layers with ``conv_kernel``
    convolution taps (not ``conv_kernel − 1``) in ``dtype`` and the recurrent state in fp32.
    """
    dtype = dtype or model.dtype or "bf16"
    per_token = sum(layer.bytes_per_token(dtype) * layer.tokens_held(n_tokens)
                    for layer in model.layers)
    state = sum(layer.state_bytes(conv_dtype=dtype, ssm_dtype="fp32", all_conv_taps=True)
                for layer in model.layers) if n_tokens > 0 else 0
    return per_token + state


def window_view_bytes(model: Model, n_tokens: int, dtype: str | None = None) -> int:
    """Bytes behind the sliding layers right after a prefill of ``n_tokens``: all T tokens."""
    dtype = dtype or model.dtype or "bf16"
    return sum(layer.bytes_per_token(dtype) * n_tokens
               for layer in model.layers if layer.cache_kind == "sliding")


def explain(model: Model, n_tokens: int) -> str:
    """Why transformers' bytes differ from kvlib's for this model at ``n_tokens`` (or agree)."""
    counts = model.layer_counts()
    notes = []
    recurrent = [lay for lay in model.layers if lay.cache_kind == "state"]
    if recurrent:
        k = recurrent[0].conv_kernel
        notes.append(f"recurrent state: transformers keeps {k} conv taps (kvlib, vLLM: {k - 1}) "
                     "and the recurrent state in fp32 (kvlib: model dtype)")
    if counts.get("sliding"):
        window = model.max_window or 0
        if n_tokens >= window - 1:
            notes.append(f"window: the tensor holds {window - 1:,} tokens like kvlib; after "
                         f"prefill it views all {n_tokens:,}")
        else:
            notes.append("window not yet full: all tokens kept")
    if counts.get("mla"):
        notes.append("MLA: transformers 5.x caches the latent + RoPE key, as kvlib")
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
    model = kvlib_model(slug, n_layers)
    hf_model = build_transformers_model(slug, n_layers)
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


def cross_check_table(slugs: Iterable[str] = tuple(ARCHITECTURES),
                      token_counts: Sequence[int] = (1, 100, 5000),
                      n_layers: Mapping[str, int] | None = None) -> Any:
    """A DataFrame with one row per (model, T): both byte counts, their ratio, the explanation."""
    import pandas as pd

    rows = []
    for slug in slugs:
        for check in cross_check(slug, token_counts, (n_layers or {}).get(slug)):
            rows.append({**asdict(check), "ratio": check.ratio, "explained": check.explained})
    return pd.DataFrame(rows)

