"""The command that starts an engine with the pool the book computes: ``launch_command(d)``.

``launch_command(Deployment("llama-3.1-70b", "h100-sxm", tp=2, weights="fp8", kv="fp8",
max_model_len=8192)).text`` is ::

    vllm serve RedHatAI/Meta-Llama-3.1-70B-Instruct-FP8 --tensor-parallel-size 2
      --max-model-len 8192 --gpu-memory-utilization 0.9 --kv-cache-dtype fp8
      --max-num-seqs 1024 --max-num-batched-tokens 8192

(one line). It reads the *resolved* deployment (``Deployment.resolved()``), so every default
the book assumed is spelled out as a flag rather than left to the engine. The checkpoint is the
registry's own (``source.repo`` of ``data/models/<slug>.json``) when the weight format is the
one it is published in, else the row of ``data/weight_checkpoints.csv`` in that format
(``kvlib.model.checkpoints.checkpoint_repository``) — never a guessed repository.

Flags, by engine (each checked against the engine's own source):

* **vLLM** 0.33 (``vllm.engine.arg_utils.EngineArgs``; ``tests/test_launch.py`` parses the
  command of every registry model and checkpoint, at each tp, KV format and set of limits,
  with ``vllm serve``'s own parser): ``--tensor-parallel-size``, ``--max-model-len`` (the
  model's own maximum when the deployment gives none, as vLLM derives it),
  ``--gpu-memory-utilization`` (the share of the GPU's whole memory the engine may take:
  weights, activations and KV pool), ``--kv-cache-dtype``, ``--max-num-seqs``,
  ``--max-num-batched-tokens``, and ``--block-size`` when it is not vLLM's 16;
  ``--pipeline-parallel-size`` and ``--data-parallel-size`` above 1, and
  ``--enable-expert-parallel`` when ep > 1 (vLLM's EP degree is then tp × dp, as kvlib's
  ``Deployment`` requires; ``vllm/config/parallel.py``, ``ParallelConfig``). No
  ``--quantization``: vLLM reads the method of every checkpoint recorded here from its config
  (``quantization_config``: compressed-tensors FP8, AWQ, block FP8, MXFP4) or from ModelOpt's
  ``hf_quant_config.json`` (``vllm/transformers_utils/config.py``, ``get_config``), so none
  needs the flag; ``VLLM_QUANTIZATION`` names a checkpoint that would.
* **SGLang** 0.5.23 (``python/sglang/srt/arg_groups/fields/{model,schedule,parallel}.py``,
  sgl-project/sglang; the wheel's ``ServerArgs.add_cli_args`` parses them):
  ``--model-path``, ``--tp-size`` (its full name: ``--tp`` only works as an argparse
  abbreviation), ``--mem-fraction-static``, ``--context-length``, ``--kv-cache-dtype``,
  ``--max-running-requests``, ``--chunked-prefill-size``, and ``--page-size`` when the
  deployment sets a block size (SGLang's own default page is 1 token). SGLang's
  ``mem_fraction_static`` is *not* vLLM's utilization: it is the share of GPU memory for the
  static allocations, weights plus KV pool, with activations and CUDA graphs outside it. The
  deployment's value is emitted as it is; kvlib does not size SGLang's pool yet.
* **TensorRT-LLM** (``tensorrt_llm/commands/serve.py``, NVIDIA/TensorRT-LLM commit
  00209af149e7774406881a37283dce303571eb11, the ``trtllm-serve`` click options):
  ``--tp_size``, ``--max_seq_len``, ``--max_num_tokens``, ``--max_batch_size``,
  ``--kv_cache_free_gpu_memory_fraction`` (the share of the memory left *free after weights
  and activations* that goes to the KV cache: a third meaning). Its KV dtype and tokens per
  block have no flag: they are ``kv_cache_config.dtype`` and ``.tokens_per_block`` of the
  LLM API (``tensorrt_llm/llmapi/llm_args.py``, ``KvCacheConfig``; defaults "auto" and 32),
  set in a YAML file passed with ``--config``. That file replaces the whole
  ``kv_cache_config`` the flags built (``update_llm_args_with_extra_dict``), so it repeats
  the memory fraction; ``LaunchCommand.files`` holds it.

KV formats map to each engine's value in ``KV_CACHE_DTYPES``; a 16-bit cache is the engine's
``auto`` (the model's own dtype); a format an engine has no value for is refused.
"""
from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass

from ..deployment import DEFAULT_BLOCK_SIZE, ENGINE_NAMES, VLLM_VERSION, Deployment
from ..model.checkpoints import checkpoint_repository
from ..model.layers import IndexerKeyLayer
from ..model.registry import model_slugs
from . import pools, sglang, tensorrt_llm
from .capacity import check_max_model_len, derived_max_model_len

#: kvlib's KV format name → each engine's ``--kv-cache-dtype`` (vLLM, SGLang) or
#: ``kv_cache_config.dtype`` (TensorRT-LLM) value, for the formats the engine stores the way
#: kvlib counts them. 16-bit caches (bf16, fp16) are "auto" everywhere (``engine_kv_dtype``).
#: vLLM 0.33 (``vllm/config/cache.py``, ``CacheDType``): "fp8" is fp8_e4m3 with per-tensor
#: scales; "nvfp4" packs 4-bit values and one fp8 scale per 16 (``head_size // 2 +
#: head_size // 16`` bytes per head, ``vllm/utils/torch_utils.py``
#: ``nvfp4_kv_cache_full_dim``): kvlib's nvfp4; "fp8_ds_mla" is FlashMLA's 656-byte
#: DeepSeek-V3.2 layout. SGLang 0.5.23 (``--kv-cache-dtype`` choices: auto, fp8_e5m2,
#: fp8_e4m3, mxfp8, bf16, bfloat16, nvfp4, fp4_mx_block16) has no plain "fp8": fp8_e4m3.
#: LMDeploy's per-token-head int8/int4 are LMDeploy's layout: vLLM's ``*_per_token_head``
#: dtypes keep their scales in their own layout, which kvlib does not count, so none maps.
KV_CACHE_DTYPES: dict[str, dict[str, str]] = {
    "vllm": {"fp8": "fp8", "fp8 (vLLM, per-tensor scale)": "fp8",
             "nvfp4 (block of 16, fp8 scale)": "nvfp4",
             "fp8 FlashMLA (DeepSeek-V3.2)": "fp8_ds_mla"},
    "sglang": {"fp8": "fp8_e4m3", "fp8 (vLLM, per-tensor scale)": "fp8_e4m3",
               "nvfp4 (block of 16, fp8 scale)": "nvfp4"},
    "tensorrt-llm": {"fp8": "fp8"},
}
#: kvlib's name of FlashMLA's fp8 cache of DeepSeek-V3.2 (vLLM's fp8_ds_mla).
FLASHMLA = "fp8 FlashMLA (DeepSeek-V3.2)"
#: 16-bit KV formats: stored in the model's own dtype by every engine's "auto".
SIXTEEN_BIT = ("bf16", "fp16")
#: kvlib dtype → the engines' explicit 16-bit name, for models whose "auto" is not 16-bit.
_EXPLICIT = {"bf16": "bfloat16", "fp16": "float16"}

#: Checkpoint repository → the ``--quantization`` vLLM needs for it. Empty: vLLM 0.33 detects
#: every checkpoint in ``data/weight_checkpoints.csv`` and the registry from its config.
VLLM_QUANTIZATION: Mapping[str, str] = {}

#: The environment variable each engine reads to accept a context past the model's maximum
#: (vLLM ``vllm/envs.py``; SGLang ``python/sglang/srt/environ.py``).
LONG_CONTEXT_ENV = {"vllm": "VLLM_ALLOW_LONG_MAX_MODEL_LEN",
                    "sglang": "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"}
#: The YAML file a TensorRT-LLM command passes with ``--config`` when it needs one.
TRTLLM_CONFIG_FILE = "kvlib-trtllm.yaml"


@dataclass(frozen=True)
class LaunchCommand:
    """A command that starts ``engine`` (``ENGINES``) as a deployment describes it.

    args: the command's words (``argv`` as a list); env: (name, value) pairs set before it;
    files: (path, text) pairs the command reads (TensorRT-LLM's ``--config`` YAML); notes:
    what the command assumes, in words.
    """

    engine: str
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    files: tuple[tuple[str, str], ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def argv(self) -> list[str]:
        """The command's words, e.g. ``["vllm", "serve", "meta-llama/...", ...]``."""
        return list(self.args)

    @property
    def text(self) -> str:
        """One shell-quoted line (``shlex.join``), the environment assignments first."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env)
        return f"{env} {shlex.join(self.args)}" if env else shlex.join(self.args)


def _sparse_mla(d: Deployment) -> bool:
    """The model has DeepSeek sparse attention (an indexer key cache: DeepSeek-V3.2)."""
    return any(isinstance(layer, IndexerKeyLayer) for layer in d.model.layers)


def engine_kv_dtype(d: Deployment) -> str:
    """The engine's KV cache dtype value for ``d.kv`` (``KV_CACHE_DTYPES``): "auto" for a
    16-bit cache (the model's own dtype), except on a DeepSeek sparse-attention model, whose
    "auto" in vLLM is an fp8 cache (``vllm/config/cache.py``, ``cache_dtype``): there the
    model's dtype by name ("bfloat16"). ValueError for a format the engine has no value for."""
    name, engine = d.kv.name, ENGINE_NAMES[d.engine]
    if name in SIXTEEN_BIT:
        if _sparse_mla(d):
            return _EXPLICIT[d.model.dtype if d.model.dtype in _EXPLICIT else name]
        return "auto"
    if _sparse_mla(d) and not (d.engine == "vllm" and name == FLASHMLA):
        if d.engine == "vllm":  # vllm/model_executor/layers/attention/mla_attention.py
            raise ValueError(f"{d.model.name}: vLLM stores every quantized cache of a DeepSeek "
                             "sparse-attention model in FlashMLA's fp8_ds_mla layout "
                             "(_canonicalize_sparse_mla_kv_cache_dtype); use "
                             f"kv={FLASHMLA!r} (or bf16)")
        raise ValueError(f"{d.model.name}: kvlib knows no quantized cache layout of a DeepSeek "
                         f"sparse-attention model in {engine}; use a 16-bit cache")
    if name == FLASHMLA and not _sparse_mla(d):
        raise ValueError(f"{d.model.name}: vLLM's fp8_ds_mla cache is served by its sparse-MLA "
                         "backends only (DeepSeek-V3.2's sparse attention)")
    known = KV_CACHE_DTYPES[d.engine]
    if name not in known:
        raise ValueError(f"{engine} has no KV cache dtype for kvlib's {name!r} cache "
                         f"(kvlib maps {', '.join(map(repr, (*SIXTEEN_BIT, *known)))} for "
                         f"{engine})")
    return known[name]


def _repository(d: Deployment, repo: str | None) -> str:
    if repo is not None:
        return repo
    if d.weights.checkpoint:
        return d.weights.checkpoint
    if not isinstance(d.slug, str) or d.slug not in model_slugs():
        raise ValueError(f"{d.model.name} is not a registry model, so no checkpoint repository "
                         "is recorded for it: pass repo='owner/name'")
    return checkpoint_repository(d.slug, d.weights)


def _context(d: Deployment) -> tuple[int | None, list[tuple[str, str]], list[str]]:
    """The context flag's value, the environment it needs and notes about it."""
    env, notes = [], []
    if d.max_model_len is not None:
        length = check_max_model_len(d.model, d.max_model_len, d.allow_long_max_model_len)
    else:
        length = derived_max_model_len(d.model)
        if length is None:
            notes.append("no context length is given and the config names none: the engine "
                         "derives it")
        else:
            notes.append(f"context length: the model's own maximum, {length:,} tokens")
    if d.allow_long_max_model_len:
        if d.engine in LONG_CONTEXT_ENV:
            env.append((LONG_CONTEXT_ENV[d.engine], "1"))
            notes.append(f"{LONG_CONTEXT_ENV[d.engine]}=1 lets the engine start past the "
                         "model's maximum context")
        else:
            notes.append(f"{ENGINE_NAMES[d.engine]} is started past the model's maximum context "
                         "without a check kvlib knows of")
    return length, env, notes


def _kv_note(d: Deployment, value: str) -> list[str]:
    if value == "auto" and d.model.dtype is not None and d.model.dtype != d.kv.name:
        return [f"KV cache dtype auto: the model's own {d.model.dtype}, 2 bytes per element "
                f"like the deployment's {d.kv.name}"]
    return []


def _vllm(d: Deployment, repo: str) -> LaunchCommand:
    length, env, notes = _context(d)
    if d.max_num_batched_tokens < d.max_num_seqs:
        raise ValueError(f"max_num_batched_tokens ({d.max_num_batched_tokens}) must be at least "
                         f"max_num_seqs ({d.max_num_seqs}): vLLM refuses to start otherwise "
                         "(vllm/config/scheduler.py, SchedulerConfig.verify_max_model_len)")
    kv = engine_kv_dtype(d)
    args = ["vllm", "serve", repo, "--tensor-parallel-size", str(d.tp)]
    if d.pp > 1:
        args += ["--pipeline-parallel-size", str(d.pp)]
    if d.dp > 1:
        args += ["--data-parallel-size", str(d.dp)]
    if d.ep > 1:
        args += ["--enable-expert-parallel"]
    if length is not None:
        args += ["--max-model-len", str(length)]
    args += ["--gpu-memory-utilization", repr(d.gpu_memory_utilization),
             "--kv-cache-dtype", kv,
             "--max-num-seqs", str(d.max_num_seqs),
             "--max-num-batched-tokens", str(d.max_num_batched_tokens)]
    if d.block_size != DEFAULT_BLOCK_SIZE:
        args += ["--block-size", str(d.block_size)]
    if repo in VLLM_QUANTIZATION:
        args += ["--quantization", VLLM_QUANTIZATION[repo]]
    if d.speculative is not None:
        args += ["--speculative-config", speculative_config(d)]
    notes += _kv_note(d, kv)
    notes.append("--gpu-memory-utilization: the share of each GPU's whole memory vLLM may "
                 "take (weights, activations and the KV pool)")
    if d.engine_version != VLLM_VERSION:
        notes.append(f"flags checked against vLLM {VLLM_VERSION}, not {d.engine_version}")
    return LaunchCommand("vllm", tuple(args), tuple(env), (), tuple(notes))


def speculative_config(d: Deployment) -> str:
    """vLLM 0.33's ``--speculative-config`` JSON for the deployment's ``speculative``: the
    method ("mtp" — vLLM's name for every MTP kind, "deepseek_mtp" being deprecated to it —,
    "eagle", "eagle3", "ngram"), ``num_speculative_tokens`` and, for EAGLE heads, the draft
    checkpoint (``model``; ValueError without one)."""
    spec = d.speculative
    config: dict[str, object] = {"method": spec.method,
                                 "num_speculative_tokens": spec.num_speculative_tokens}
    if spec.method in ("eagle", "eagle3"):
        if not spec.model:
            raise ValueError(f"{spec.method} needs its draft head's checkpoint: "
                             "Speculative(..., model='<repository>') or --draft-model")
        config["model"] = spec.model
    return json.dumps(config)


def _sglang(d: Deployment, given: Deployment, repo: str) -> LaunchCommand:
    """SGLang's command with the values its pool was sized with (``sglang.kv_pool``): its own
    default fraction, prefill chunk and running cap where the deployment gives none."""
    length, env, notes = _context(d)
    kv = engine_kv_dtype(d)
    pool = sglang.kv_pool(given)
    block_size = given.block_size
    args = ["python", "-m", "sglang.launch_server", "--model-path", repo,
            "--tp-size", str(d.tp), "--mem-fraction-static", repr(pool.mem_fraction_static)]
    if length is not None:
        args += ["--context-length", str(length)]
    args += ["--kv-cache-dtype", kv]
    if pool.max_running_requests is not None:
        args += ["--max-running-requests", str(pool.max_running_requests)]
    args += ["--chunked-prefill-size", str(pool.chunked_prefill_size)]
    if block_size is not None:
        args += ["--page-size", str(block_size)]
    notes += _kv_note(d, kv)
    notes.append("--mem-fraction-static: SGLang's share of GPU memory for weights plus the KV "
                 f"pool (activations and CUDA graphs outside it), not vLLM's utilization: "
                 f"{pool.mem_fraction_source}")
    return LaunchCommand("sglang", tuple(args), tuple(env), (), tuple(notes))


def _trtllm(d: Deployment, given: Deployment, repo: str) -> LaunchCommand:
    """trtllm-serve's command with the values its pool was sized with (``tensorrt_llm.kv_pool``)."""
    length, env, notes = _context(d)
    kv = engine_kv_dtype(d)
    pool = tensorrt_llm.kv_pool(given)
    block_size = given.block_size
    args = ["trtllm-serve", repo, "--tp_size", str(d.tp)]
    if length is not None:
        args += ["--max_seq_len", str(length)]
    args += ["--max_num_tokens", str(pool.max_num_tokens),
             "--max_batch_size", str(pool.max_batch_size),
             "--kv_cache_free_gpu_memory_fraction", repr(pool.free_gpu_memory_fraction)]
    files: tuple[tuple[str, str], ...] = ()
    if kv != "auto" or block_size is not None:
        lines = ["kv_cache_config:", f"  free_gpu_memory_fraction: {pool.free_gpu_memory_fraction!r}"]
        if kv != "auto":
            lines.append(f"  dtype: {kv}")
        if block_size is not None:
            lines.append(f"  tokens_per_block: {block_size}")
        files = ((TRTLLM_CONFIG_FILE, "\n".join(lines) + "\n"),)
        args += ["--config", TRTLLM_CONFIG_FILE]
        notes.append(f"--config {TRTLLM_CONFIG_FILE}: the KV cache settings trtllm-serve has no "
                     "flag for (write the file first; LaunchCommand.files holds it)")
    notes += _kv_note(d, kv)
    notes.append("--kv_cache_free_gpu_memory_fraction: the share of the memory free after "
                 "weights and activations that TensorRT-LLM gives the KV cache, not vLLM's "
                 "utilization")
    return LaunchCommand("tensorrt-llm", tuple(args), tuple(env), files, tuple(notes))


def launch_command(deployment: Deployment, *, repo: str | None = None) -> LaunchCommand:
    """The command that starts ``deployment.engine`` as ``deployment`` describes it, every
    default the book assumed spelled out (``Deployment.resolved()``); ``repo`` overrides the
    checkpoint repository (needed for a model that is not in the registry).

    ValueError when no checkpoint in the deployment's weight format is recorded, when the
    engine has no value for its KV format, or when the engine would refuse the settings: no
    memory left for a KV cache (``NoKVMemory``), or, for vLLM, a pool shorter than one request
    of ``--max-model-len`` tokens."""
    if not isinstance(deployment, Deployment):
        raise TypeError(f"launch_command takes a Deployment, got {type(deployment).__name__}")
    d = deployment.resolved()
    if d.speculative is not None and d.engine != "vllm":
        raise ValueError(f"speculative decoding is modelled for vLLM only, not {d.engine}")
    checkpoint = _repository(d, repo)
    if d.engine == "vllm":
        command = _vllm(d, checkpoint)
    elif d.engine == "sglang":
        command = _sglang(d, deployment, checkpoint)
    else:
        command = _trtllm(d, deployment, checkpoint)
    pool = pools.kv_pool(deployment)  # NoKVMemory where the engine has no memory for a cache
    length = _context(d)[0]
    if d.engine == "vllm" and length is not None and pool.max_concurrency(length) < 1:
        # vllm/v1/core/kv_cache_planning.py, check_enough_kv_cache_memory
        raise ValueError(f"vLLM refuses to start: its KV pool holds {pool.tokens:,} tokens, "
                         f"fewer than one request of --max-model-len {length:,}; give a "
                         "shorter max_model_len, more GPUs or a smaller format")
    return command
