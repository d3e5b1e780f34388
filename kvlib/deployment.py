"""What an engine is started with: one frozen ``Deployment`` that every pipeline function takes.

``vllm serve MODEL --tensor-parallel-size 2 --kv-cache-dtype fp8 --gpu-memory-utilization 0.9``
is ``Deployment("llama-3.1-70b", "h100-sxm", tp=2, weights="fp8", kv="fp8")``. A field left
``None`` means "the engine's default"; ``resolved()`` fills every such field in this one place,
and the pool, the step times, the serving point, the prefix cost, the landing grid and the CLI
read the resolved values.

Above ``model`` and ``hardware``, below ``engines``: it imports only those two layers.
"""
from __future__ import annotations

import csv
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from functools import lru_cache
from typing import Any

from .core.checks import number, positive_integer
from .core.data import csv_path
from .core.units import GIB
from .hardware.gpus import GPU, resolve_gpu
from .model.checkpoints import checkpoint_weight_format
from .model.formats import KVFormat, WeightFormat, kv_format, weight_format
from .model.model import Model
from .model.registry import resolve_model

#: The engines kvlib names (``engine``).
ENGINES = ("vllm", "sglang", "tensorrt-llm")
#: The engine's name as a reader knows it.
ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "tensorrt-llm": "TensorRT-LLM"}
#: The vLLM release the book pins (``requirements-vllm.txt``) and tests its oracles against.
VLLM_VERSION = "0.33.0"
#: The release of each engine whose rules kvlib follows when a deployment names none: vLLM's
#: pinned one, SGLang's wheel read for its pool, TensorRT-LLM's source commit read for its pool.
ENGINE_VERSIONS = {"vllm": VLLM_VERSION, "sglang": "0.5.23", "tensorrt-llm": "d8ae02caed59"}

#: The ``gpu_memory_utilization`` the book's figures use when neither it nor ``engine_version``
#: is given: vLLM's default before 0.21, under which every calibration log was taken (and the
#: source article's number). A deployment that names its vLLM release gets that release's
#: default instead (``vllm_memory_rules``): 0.92 from 0.21 on (vLLM PR #38284).
BOOK_UTILIZATION = 0.9
VLLM_DEFAULT_UTILIZATION = 0.92
#: vLLM's default tokens per KV block (``CacheConfig.block_size``) for attention layers.
DEFAULT_BLOCK_SIZE = 16
#: The profiled forward pass (and the prefill chunk) the book's figures use when none is given:
#: vLLM's OpenAI-server default on the large GPUs (``default_max_num_batched_tokens``).
BOOK_MAX_NUM_BATCHED_TOKENS = 8192


#: vLLM's model runners: the V1 ``GPUModelRunner`` and the V2 one (``vllm/v1/worker/gpu/``).
MODEL_RUNNERS = ("v1", "v2")


@dataclass(frozen=True)
class VLLMMemoryRules:
    """The memory rules of one model runner over a range of vLLM releases (one row of
    ``data/vllm_memory_rules.csv``): since/until: first release with them and first without
    ("" = open); runner: "v1" or "v2"; default_for: which models the release runs on it
    ("all"; "the rest": those its V2 row does not take; "listed dense unquantized", "listed",
    "listed or dense": by ``architectures``, see ``takes``; "fallback": none, only deployments
    with a feature of ``vllm_fallbacks``); the default
    ``gpu_memory_utilization``; whether the CUDA-graph estimate is subtracted before the KV
    cache is sized; sampler_term: how kvlib charges the dummy sampling pass ("fitted": the
    calibrated fp32 copies of the sorting pipeline, ``Overheads.sampler_copies``; "triton":
    the tensors of the Triton top-k/top-p path, ``Overheads.triton_fp32_tensors``; "logits":
    one logits tensor in the model dtype, ``Overheads.logit_bytes``; "warmup": vLLM 0.33's
    second pass with every sampling parameter on, the logits and ``Overheads.warmup_fp32_tensors``
    fp32 tensors where FlashInfer samples, ``capacity.sampler_bytes``);
    sampler_state_in_profile: the V2 runner's persistent penalty state
    (``capacity.sampler_state_bytes``) is counted as non-KV memory (V2 rows from 0.27.0, whose
    profile takes the whole drop in free memory since start-up); the activation profile
    and tensor-parallel buffers, in words; source."""

    since: str
    until: str
    runner: str
    default_for: str
    architectures: tuple[str, ...]
    default_gpu_memory_utilization: float
    cuda_graphs_in_profile: bool
    sampler_term: str
    sampler_state_in_profile: bool
    activation_profile: str
    tp_buffers: str
    source: str

    @property
    def label(self) -> str:
        """The releases and runner in words: "before 0.17", "0.27–0.28, V2 runner"."""
        if not self.since:
            return f"before {_minor(self.until)}"
        first = _minor(self.since)
        if not self.until:
            span = f"{first} and later"
        else:
            major, minor = vllm_release(self.until)[:2]
            last = f"{major}.{minor - 1}"
            span = first if last == first else f"{first}–{last}"
        return f"{span}, {self.runner.upper()} runner"

    def takes(self, model: Model, quantized: bool = False) -> bool:
        """Whether this row's release runs ``model`` on this row's runner by default
        (``VllmConfig._is_default_v2_model_runner_model`` of each release; ``quantized``: the
        weights are not bf16/fp16). "dense": no experts and no recurrent state. The features
        that send a deployment back to V1 are ``vllm_fallbacks``."""
        if self.default_for in ("all", "the rest"):
            return True
        if self.default_for == "fallback":
            return False
        arch = model.architecture
        listed = arch is not None and any(a in self.architectures for a in arch.architectures)
        dense = arch is not None and arch.moe is None and not model.has_state
        if self.default_for == "listed dense unquantized":
            return listed and dense and not quantized
        if self.default_for == "listed":
            return listed
        if self.default_for == "listed or dense":
            return dense or (listed and not model.has_state)
        raise ValueError(f"vllm_memory_rules.csv: unknown default_for {self.default_for!r}")


def _minor(version: str) -> str:
    major, minor = vllm_release(version)[:2]
    return f"{major}.{minor}"


def vllm_release(version: str) -> tuple[int, ...] | None:
    """(major, minor, patch) of a version string as logs print it ("0.15.2rc1.dev93+g11a…",
    "v0.2.x", "0.5.4 (docker)"); a release named without its patch is its first ("0.21" is
    0.21.0); None when it names no release ("main, 2024-12-13")."""
    return _release(str(version))


@lru_cache(maxsize=512)
def _release(version: str) -> tuple[int, ...] | None:
    found = re.match(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?", version)
    if not found:
        return None
    major, minor, patch = found.groups()
    return int(major), int(minor), int(patch or 0)


def _release_columns(name: str, rows: list[dict[str, str]], required: tuple[str, ...] = ()
                     ) -> list[dict[str, str]]:
    """``rows`` of data file ``name`` once each ``since_version`` / ``until_version`` is empty
    (no bound; not for a column in ``required``) or names a release; ValueError naming the
    file, line and column otherwise."""
    for line, r in enumerate(rows, start=2):
        for column in ("since_version", "until_version"):
            value = r.get(column) or ""
            if (value or column in required) and vllm_release(value) is None:
                raise ValueError(f"{name} line {line}, column {column}: {value!r} names no "
                                 "vLLM release (give e.g. 0.19.0)")
    return rows


@lru_cache(maxsize=1)
def vllm_rule_rows() -> tuple[VLLMMemoryRules, ...]:
    """Every row of ``data/vllm_memory_rules.csv``, in file order."""
    with open(csv_path("vllm_memory_rules.csv"), newline="", encoding="utf-8") as f:
        rows = _release_columns("vllm_memory_rules.csv", list(csv.DictReader(f)))
        return tuple(VLLMMemoryRules(
            since=r["since_version"], until=r["until_version"], runner=r["model_runner"],
            default_for=r["default_for"], architectures=tuple(r["default_architectures"].split()),
            default_gpu_memory_utilization=float(r["default_gpu_memory_utilization"]),
            cuda_graphs_in_profile=r["cuda_graphs_in_profile"] == "true",
            sampler_term=r["sampler_term"],
            sampler_state_in_profile=r["sampler_state_in_profile"] == "true",
            activation_profile=r["activation_profile"],
            tp_buffers=r["tp_buffers"], source=r["source_url"]) for r in rows)


@dataclass(frozen=True)
class VLLMFallback:
    """A deployment feature that makes vLLM releases since … until (first without) run the V1
    runner where their V2 one would run the model (one row of
    ``data/vllm_runner_fallbacks.csv``): the speculative method it takes ("": any), the fewest
    pipeline stages, the GPU vendor ("": any), config architectures (empty: any); feature: in
    words; reason: vLLM's own words; source."""

    since: str
    until: str
    feature: str
    speculative_method: str
    min_pp: int
    gpu_vendor: str
    architectures: tuple[str, ...]
    reason: str
    source: str


@lru_cache(maxsize=1)
def vllm_fallback_rows() -> tuple[VLLMFallback, ...]:
    """Every row of ``data/vllm_runner_fallbacks.csv``, in file order."""
    with open(csv_path("vllm_runner_fallbacks.csv"), newline="", encoding="utf-8") as f:
        rows = _release_columns("vllm_runner_fallbacks.csv", list(csv.DictReader(f)),
                                required=("since_version", "until_version"))
        return tuple(VLLMFallback(
            since=r["since_version"], until=r["until_version"], feature=r["feature"],
            speculative_method=r["speculative_method"], min_pp=int(r["min_pp"] or 1),
            gpu_vendor=r["gpu_vendor"], architectures=tuple(r["architectures"].split()),
            reason=r["vllm_reason"], source=r["source_url"]) for r in rows)


def vllm_fallbacks(version: str, model: Model | str | None = None, *,
                   speculative_method: str | None = None, pp: int = 1,
                   gpu_vendor: str = "") -> tuple[VLLMFallback, ...]:
    """The features of a deployment (its model, speculative method, pipeline stages, GPU
    vendor) for which vLLM ``version``'s ``VllmConfig.use_v2_model_runner`` picks the V1
    runner over the V2 one (``data/vllm_runner_fallbacks.csv``)."""
    release = vllm_release(version)
    arch = resolve_model(model).architecture if model is not None else None
    archs = arch.architectures if arch is not None else ()
    return tuple(f for f in vllm_fallback_rows()
                 if vllm_release(f.since) <= release < vllm_release(f.until)
                 and f.speculative_method in ("", speculative_method) and pp >= f.min_pp
                 and f.gpu_vendor in ("", gpu_vendor)
                 and (not f.architectures or any(a in f.architectures for a in archs)))


def vllm_memory_rules(version: str, model: Model | str | None = None, *,
                      quantized: bool = False, speculative_method: str | None = None,
                      pp: int = 1, gpu_vendor: str = "") -> VLLMMemoryRules:
    """The rules of vLLM ``version`` ("0.19.0", "0.33.0") for ``model``: those of the runner
    the release runs it on (its V2 row when that row ``takes`` the model and the deployment
    has none of the ``vllm_fallbacks`` features, else its V1 row). Without a model, the runner
    the release runs every model on that it does not single out (V1 before 0.29, V2 from
    0.29). ValueError for a string that names no release, or a fallback the rules have no V1
    row for."""
    release = vllm_release(version)
    if release is None:
        raise ValueError(f"vLLM version {version!r} names no release (give e.g. '0.19.0')")
    rows = _rules_by_runner(release)
    if not rows:
        raise ValueError(f"no vLLM memory rules cover version {version!r}")
    v2 = rows.get("v2")
    if v2 is not None and (v2.default_for == "all" or "v1" not in rows or (
            model is not None and v2.takes(resolve_model(model), quantized))):
        fallback = vllm_fallbacks(version, model, speculative_method=speculative_method, pp=pp,
                                  gpu_vendor=gpu_vendor)
        if not fallback:
            return v2
        if "v1" not in rows:
            raise ValueError(f"vLLM {version} runs {fallback[0].feature} on its V1 runner, which "
                             "data/vllm_memory_rules.csv has no row for")
    return rows["v1"]


@lru_cache(maxsize=64)
def _rules_by_runner(release: tuple[int, ...]) -> dict[str, VLLMMemoryRules]:
    """The rows of ``vllm_rule_rows`` that cover ``release``, by model runner."""
    return {r.runner: r for r in vllm_rule_rows()
            if (not r.since or release >= vllm_release(r.since))
            and (not r.until or release < vllm_release(r.until))}


def default_max_num_seqs(gpu: GPU) -> int:
    """vLLM's default ``max_num_seqs`` for the OpenAI server: 1024 on GPUs with ≥ 70 GiB that
    are not A100s (H100/H200/B200/MI300X), 256 elsewhere (``EngineArgs`` usage defaults)."""
    big = gpu.usable_memory_bytes >= 70 * GIB and not gpu.slug.startswith("a100")
    return 1024 if big else 256


def default_max_num_batched_tokens(gpu: GPU) -> int:
    """vLLM's default ``max_num_batched_tokens`` for the OpenAI server: 8192 on the large GPUs
    of ``default_max_num_seqs``, 2048 elsewhere."""
    return 8192 if default_max_num_seqs(gpu) == 1024 else 2048


#: Speculative-decoding methods kvlib models, by what drafts: the checkpoint's own
#: multi-token-prediction layers ("mtp"), an EAGLE or EAGLE-3 draft head ("eagle", "eagle3"),
#: n-gram lookup in the prompt ("ngram", no model and no KV). The names are vLLM 0.33's
#: ``SpeculativeConfig.method`` values.
SPECULATIVE_METHODS = ("mtp", "eagle", "eagle3", "ngram")


@dataclass(frozen=True)
class Speculative:
    """Speculative decoding as the engine is started with it (``--speculative-config``).

    method: one of ``SPECULATIVE_METHODS``; num_speculative_tokens: k, the tokens drafted per
    step; acceptance: the per-token acceptance rate α (each draft token accepted with
    probability α once the ones before it were), or the measured per-position acceptance
    rates (vLLM's "Per-position acceptance rate": the share of drafts whose position i was
    accepted, non-increasing, k values); draft_layers: decoder layers in the draft (None: the
    checkpoint's MTP layers for "mtp", 1 for EAGLE, 0 for n-gram); model: the draft head's
    checkpoint repository (EAGLE and EAGLE-3 need one to start; MTP and n-gram none).
    """

    method: str
    num_speculative_tokens: int
    acceptance: float | tuple[float, ...]
    draft_layers: int | None = None
    model: str | None = None

    def __post_init__(self) -> None:
        if self.method not in SPECULATIVE_METHODS:
            raise ValueError(f"unknown speculative method {self.method!r}; known: "
                             f"{', '.join(SPECULATIVE_METHODS)}")
        k = positive_integer("num_speculative_tokens", self.num_speculative_tokens)
        object.__setattr__(self, "num_speculative_tokens", k)
        a = self.acceptance
        if isinstance(a, (list, tuple)):
            rates = tuple(number("acceptance", r, minimum=0, maximum=1) for r in a)
            if len(rates) != k:
                raise ValueError(f"acceptance lists {len(rates)} positions for "
                                 f"num_speculative_tokens={k}")
            if any(b > c for c, b in zip(rates, rates[1:])):
                raise ValueError("per-position acceptance rates cannot rise with the position")
            object.__setattr__(self, "acceptance", rates)
        else:
            object.__setattr__(self, "acceptance", number("acceptance", a, minimum=0,
                                                          maximum=1))
        if self.model is not None and (not isinstance(self.model, str) or not self.model.strip()):
            raise ValueError(f"Speculative.model must name the draft checkpoint's repository, "
                             f"got {self.model!r}")
        if self.method == "ngram" and self.draft_layers:
            raise ValueError("n-gram speculation has no draft layers")
        if self.draft_layers is not None and self.method != "ngram":
            object.__setattr__(self, "draft_layers",
                               positive_integer("draft_layers", self.draft_layers))

    @property
    def position_rates(self) -> tuple[float, ...]:
        """The share of steps whose draft position i = 1 … k is accepted: αⁱ for a rate α."""
        if isinstance(self.acceptance, tuple):
            return self.acceptance
        return tuple(self.acceptance ** i for i in range(1, self.num_speculative_tokens + 1))

    @property
    def tokens_per_step(self) -> float:
        """Tokens one target step emits per request: 1 + Σ position rates, the mean acceptance
        length; for a rate α, (1 − α^(k+1)) ÷ (1 − α) (Leviathan et al. 2023, eq. 1)."""
        return 1.0 + sum(self.position_rates)


def speculative(value: Speculative | str) -> Speculative:
    """A ``Speculative`` from itself or from ``"method:k:acceptance"`` ("mtp:1:0.85"; the
    acceptance may be per-position rates joined by "/", "eagle3:3:0.8/0.6/0.45")."""
    if isinstance(value, Speculative):
        return value
    if not isinstance(value, str):
        raise TypeError(f"speculative must be a Speculative or 'method:k:acceptance', got "
                        f"{type(value).__name__}")
    parts = value.split(":")
    if len(parts) != 3:
        raise ValueError(f"speculative {value!r}: expected 'method:k:acceptance', e.g. "
                         "'mtp:1:0.85'")
    method, k, rates = parts
    try:
        n = int(k)
        values = [float(r) for r in rates.split("/")]
    except ValueError:
        raise ValueError(f"speculative {value!r}: k must be an integer and the acceptance "
                         "numbers") from None
    return Speculative(method, n, values[0] if len(values) == 1 else tuple(values))


#: The parallel degrees and the engine limits among ``Deployment``'s fields.
_DEGREES = frozenset(("tp", "pp", "dp", "ep"))
_LIMITS = ("max_model_len", "max_num_seqs", "max_num_batched_tokens", "block_size")
#: The fields ``Deployment.with_`` changes with only their own checks.
_QUICK = _DEGREES | set(_LIMITS) | {"gpu_memory_utilization"}


def _degree(name: str, value: Any) -> int:
    return positive_integer(name, value)


def _check_utilization(value: Any) -> None:
    if value is not None and not (0 < number("gpu_memory_utilization", value) <= 1):
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {value!r}")


def _check_parallel(d: Deployment) -> None:
    """Refuse the parallel layouts kvlib does not model, naming them: more pipeline stages than
    layers; expert parallelism on a model without routed experts, or of a degree other than
    tp × dp (vLLM's EP group is every GPU of a pipeline stage: ``FusedMoEParallelConfig.make``)."""
    layers = d.model.architecture.layers if d.model.architecture is not None else d.model.layers
    if d.pp > len(layers):
        raise ValueError(f"pp={d.pp}: more pipeline stages than {d.model.name}'s "
                         f"{len(layers)} layers")
    if d.ep == 1:
        return
    moe = d.model.architecture.moe if d.model.architecture is not None else None
    if moe is None:
        raise ValueError(f"ep={d.ep}: {d.model.name} has no routed experts to spread")
    if d.ep != d.tp * d.dp:
        raise ValueError(f"ep={d.ep}: kvlib models expert parallelism over every GPU of a "
                         f"stage only, ep = tp × dp = {d.tp * d.dp}")
    if moe.n_experts % d.ep:
        raise ValueError(f"ep={d.ep}: {d.model.name}'s {moe.n_experts} experts do not split "
                         "evenly (vLLM's uneven split is not modelled)")


@dataclass(frozen=True)
class Deployment:
    """One engine started on one group of GPUs (public API; field names are kept).

    Every number kvlib derives from it is per GPU unless its name says otherwise.
    """

    #: The model: a registry slug (``data/models/<slug>.json``) or a ``Model``.
    model: Model | str
    #: The GPU kind: a slug of ``data/gpus.csv`` or a ``GPU``.
    gpu: GPU | str
    #: Tensor-parallel degree: GPUs each layer is split across (``--tensor-parallel-size``).
    tp: int = 1
    #: Pipeline-parallel stages (``--pipeline-parallel-size``): the layers split over pp
    #: groups of tp GPUs.
    pp: int = 1
    #: Data-parallel ranks (``--data-parallel-size``): dp engines, each with its own requests
    #: and KV pool; for a MoE their experts are shared across the dp × tp GPUs of a stage.
    dp: int = 1
    #: Expert-parallel degree: 1 (experts tensor-split), or tp × dp (vLLM's
    #: ``--enable-expert-parallel``: whole experts spread over every GPU of a stage).
    ep: int = 1
    #: The weight format: a ``WeightFormat``, a format name ("fp8") or component → format;
    #: None: the format of the checkpoint the model's config describes (its
    #: ``quantization_config``, else bf16: ``checkpoint_weight_format``).
    weights: WeightFormat | str | Mapping[str, str] | None = None
    #: The KV-cache format: a ``KVFormat`` or its name ("bf16", "fp8", …; ``--kv-cache-dtype``).
    kv: KVFormat | str = "bf16"
    #: The serving engine, one of ``ENGINES``.
    engine: str = "vllm"
    #: The engine release where behaviour depends on it; None: ``ENGINE_VERSIONS[engine]``
    #: (for vLLM with the book's utilization, ``BOOK_UTILIZATION``).
    engine_version: str | None = None
    #: The engine's memory fraction, (0, 1]: vLLM's ``--gpu-memory-utilization``, SGLang's
    #: ``--mem-fraction-static``, TensorRT-LLM's ``free_gpu_memory_fraction``; None: vLLM
    #: the named release's default, or ``BOOK_UTILIZATION`` when no release is named
    #: (``resolved``), SGLang and TensorRT-LLM their own defaults
    #: (``kvlib.engines.sglang`` / ``kvlib.engines.tensorrt_llm``, which read the unresolved field).
    gpu_memory_utilization: float | None = None
    #: The context the engine is started with (tokens); None: the request's own length.
    max_model_len: int | None = None
    #: Most requests decoded together (``--max-num-seqs``); None: vLLM's default for the GPU.
    max_num_seqs: int | None = None
    #: Token budget of one step (``--max-num-batched-tokens``); None: 8,192.
    max_num_batched_tokens: int | None = None
    #: Tokens per KV block (``--block-size``); None: 16.
    block_size: int | None = None
    #: The speed model's constants (a ``kvlib.speed.roofline.Efficiency``); None: calibrated.
    efficiency: Any = None
    #: Start past the model's own maximum context (vLLM's ``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1``).
    allow_long_max_model_len: bool = False
    #: Speculative decoding (a ``Speculative`` or "method:k:acceptance"); None: none.
    speculative: Speculative | str | None = None
    #: The registry slug or the model's name (set from ``model``).
    slug: str = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        given = self.model
        object.__setattr__(self, "model", resolve_model(given))
        object.__setattr__(self, "slug", given if isinstance(given, str) else self.model.name)
        object.__setattr__(self, "gpu", resolve_gpu(self.gpu))
        for name in _DEGREES:
            _degree(name, getattr(self, name))
        _check_parallel(self)
        if self.weights is None:
            object.__setattr__(self, "weights", checkpoint_weight_format(self.model))
        object.__setattr__(self, "weights", weight_format(self.weights))
        object.__setattr__(self, "kv", kv_format(self.kv))
        if self.engine not in ENGINES:
            raise ValueError(f"unknown engine {self.engine!r}; known: {', '.join(ENGINES)}")
        if self.engine_version is not None and not isinstance(self.engine_version, str):
            raise TypeError(f"engine_version must be a string such as '0.19.0', got "
                            f"{self.engine_version!r}")
        if self.engine == "vllm" and self.engine_version is not None:
            vllm_memory_rules(self.engine_version)  # a release the rules cover
        elif self.engine_version not in (None, ENGINE_VERSIONS[self.engine]):
            raise ValueError(f"engine_version {self.engine_version!r}: kvlib models "
                             f"{ENGINE_NAMES[self.engine]} at {ENGINE_VERSIONS[self.engine]} "
                             "only")
        refused = engine_refusal(self.engine, self.gpu)
        if refused:
            raise ValueError(f"{refused}: choose engine vllm or sglang")
        _check_utilization(self.gpu_memory_utilization)
        for name in _LIMITS:
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, positive_integer(name, value))
        if not isinstance(self.allow_long_max_model_len, bool):
            raise TypeError("allow_long_max_model_len must be True or False")
        if self.speculative is not None:
            object.__setattr__(self, "speculative", speculative(self.speculative))

    @property
    def n_gpus(self) -> int:
        """GPUs one data-parallel rank's layers occupy: tp × pp."""
        return self.tp * self.pp

    @property
    def gpus(self) -> int:
        """GPUs the whole deployment occupies: tp × pp × dp."""
        return self.tp * self.pp * self.dp

    @property
    def kv_name(self) -> str:
        """The KV format's name ("bf16", "fp8", …)."""
        return self.kv.name

    def resolved(self) -> Deployment:
        """The same deployment with every engine default filled in (``None`` → a value), except
        ``max_model_len``, whose default is the request's own length."""
        g = self.gpu
        if self.gpu_memory_utilization is not None:
            util = float(self.gpu_memory_utilization)
        elif self.engine == "vllm" and self.engine_version is not None:
            util = vllm_memory_rules(self.engine_version).default_gpu_memory_utilization
        else:
            util = BOOK_UTILIZATION
        return self.with_(
            engine_version=self.engine_version or ENGINE_VERSIONS[self.engine],
            gpu_memory_utilization=util,
            max_num_seqs=(default_max_num_seqs(g) if self.max_num_seqs is None
                          else self.max_num_seqs),
            max_num_batched_tokens=(BOOK_MAX_NUM_BATCHED_TOKENS if self.max_num_batched_tokens
                                    is None else self.max_num_batched_tokens),
            block_size=DEFAULT_BLOCK_SIZE if self.block_size is None else self.block_size)

    def vllm_rules(self) -> VLLMMemoryRules:
        """vLLM's memory rules for this deployment: those of its release (the pinned
        ``VLLM_VERSION`` when it names none) for the runner that release runs it on
        (``vllm_memory_rules``; quantized: any component stored in fewer than 16 bits; the
        speculative method, pipeline stages and GPU vendor for ``vllm_fallbacks``)."""
        quantized = min(self.weights.bits.values()) < 16
        return vllm_memory_rules(
            self.engine_version or VLLM_VERSION, self.model, quantized=quantized,
            speculative_method=self.speculative.method if self.speculative else None,
            pp=self.pp, gpu_vendor=self.gpu.vendor)

    def with_(self, **changes: Any) -> Deployment:
        """A copy with ``changes`` (field names), the model kept as it was given (the same
        ``Model``, and its registry slug: not read from the registry again). Changing only
        parallel degrees, limits or the memory fraction checks just those (the rest was
        checked when ``self`` was made); anything else goes through ``__post_init__``."""
        if not changes.keys() <= _QUICK:
            copy = replace(self, **changes)
            if "model" not in changes:
                object.__setattr__(copy, "slug", self.slug)
            return copy
        copy = object.__new__(Deployment)
        values = copy.__dict__
        values.update(self.__dict__)
        for name, value in changes.items():
            if name in _DEGREES:
                value = _degree(name, value)
            elif name == "gpu_memory_utilization":
                _check_utilization(value)
            elif value is not None:
                value = positive_integer(name, value)
            values[name] = value
        if changes.keys() & _DEGREES:
            _check_parallel(copy)
        return copy


def engine_refusal(engine: str, gpu: GPU) -> str:
    """"" when ``engine`` runs on ``gpu``, else why not: TensorRT-LLM runs on NVIDIA GPUs only."""
    if engine == "tensorrt-llm" and gpu.vendor != "NVIDIA":
        return f"TensorRT-LLM runs on NVIDIA GPUs only, not the {gpu.name}"
    return ""


#: The keyword names of the functions that predate ``Deployment`` → its field names.
KEYWORD_FIELDS = {"n_gpus": "tp", "weight_dtype": "weights", "kv_dtype": "kv"}
_FIELDS = {f.name for f in fields(Deployment) if f.init}


def deployment(model: Deployment | Model | str, gpu: GPU | str | None = None,
               **keywords: Any) -> Deployment:
    """The ``Deployment`` a function was given: ``model`` itself when it is one (then nothing
    else may be), else one built from ``model``, ``gpu`` and the keywords — field names, or the
    older ``n_gpus`` / ``weight_dtype`` / ``kv_dtype``. None keywords are left at their default.
    TypeError naming a keyword that is no field."""
    if keywords.get("n_gpus") is not None:
        positive_integer("n_gpus", keywords["n_gpus"])  # named as the caller named it
    given = {KEYWORD_FIELDS.get(k, k): v for k, v in keywords.items() if v is not None}
    unknown = sorted(set(given) - _FIELDS)
    if unknown:
        raise TypeError(f"unknown deployment keyword(s): {', '.join(unknown)}")
    if isinstance(model, Deployment):
        if gpu is not None:
            raise TypeError("pass a Deployment alone, or a model and a GPU")
        return model.with_(**given) if given else model
    if gpu is None:
        raise TypeError("a deployment needs a GPU: deployment(model, gpu, ...)")
    return Deployment(model, gpu, **given)
