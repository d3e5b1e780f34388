"""vLLM's own KV-cache manager as an oracle for ``kvlib.engines.prefix`` (needs ``requirements-vllm.txt``).

``vllm_prefix_hits`` drives ``vllm.v1.core.kv_cache_manager.KVCacheManager`` (vLLM 0.33.0) on the
CPU exactly as the v1 scheduler does for requests that run one after another: look up the
prefix cache, allocate the prompt's slots, then one slot per decoded token (the last sampled
token is never fed back), and free the request. It returns the tokens each request hit, for
``tests/test_prefix.py`` to compare with ``kvlib.replay_prefix_cache`` and for ``kvlib.report.bench``
to time. ``vllm_serving_run`` drives vLLM's v1 ``Scheduler`` itself on a virtual clock, with prefix
caching off or (given prompt token ids) on, for ``tests/test_serving_sim_oracle.py`` to compare
with ``simulate_serving``. vLLM is imported on
first use; nothing else in kvlib needs it.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core.checks import positive_integer


def _cpu_environment() -> None:
    """vLLM on this CPU: its device and an offline hub, set before vLLM is first imported (the
    platform is fixed at import, so every entry point here sets them, not only the first)."""
    import os

    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")


def vllm_prefix_hits(requests: Sequence[Any], *, block_size: int = 16,
                     capacity_blocks: int | None = None,
                     outputs: Sequence[Any] | None = None) -> NDArray[np.int64]:
    """Tokens vLLM's ``KVCacheManager`` serves from its prefix cache for each request, in order.

    ``capacity_blocks=None`` gives the pool one block more than all requests together hold, so
    nothing is ever evicted. Raises ValueError when a request does not fit the pool.
    """
    _cpu_environment()
    import torch
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_manager import KVCacheManager
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.request import Request

    block_size = positive_integer("block_size", block_size)
    prompts = [np.asarray(p).tolist() for p in requests]
    outs = [np.asarray(o).tolist() for o in outputs] if outputs is not None else [[0]] * len(prompts)
    lengths = [len(p) + len(o) - 1 for p, o in zip(prompts, outs)]
    if capacity_blocks is None:
        capacity_blocks = sum(-(-n // block_size) for n in lengths) + 1
    spec = FullAttentionSpec(block_size=block_size, num_kv_heads=1, head_size=64,
                             dtype=torch.bfloat16)
    config = KVCacheConfig(num_blocks=capacity_blocks + 1, kv_cache_tensors=[],
                           kv_cache_groups=[KVCacheGroupSpec(["layer0"], spec)])
    longest = max(lengths) + 1
    manager = KVCacheManager(config, max_model_len=longest, scheduler_block_size=block_size,
                             hash_block_size=block_size, enable_caching=True)
    init_none_hash(sha256)
    hasher = get_request_block_hasher(block_size, sha256)
    hits = []
    for i, (prompt, out) in enumerate(zip(prompts, outs)):
        req = Request(str(i), prompt, SamplingParams(max_tokens=len(out)), None,
                      block_hasher=hasher)
        blocks, hit, *_ = manager.get_computed_blocks(req)
        if manager.allocate_slots(req, len(prompt) - hit, hit, blocks) is None:
            raise ValueError(f"request {i} ({len(prompt):,} tokens) does not fit "
                             f"{capacity_blocks:,} blocks")
        req.num_computed_tokens = len(prompt)
        for token in out[:-1]:                # each decode step feeds back one sampled token
            req.append_output_token_ids(token)
            if manager.allocate_slots(req, 1) is None:
                raise ValueError(f"request {i} does not fit {capacity_blocks:,} blocks")
            req.num_computed_tokens += 1
        manager.free(req)
        hits.append(hit)
    return np.asarray(hits, dtype=np.int64)


def _llama_config_dir() -> str:
    """A folder holding just the config.json of ``data/models/llama-3.1-8b.json`` (made once)."""
    import json
    import tempfile
    from pathlib import Path

    from ..core.data import data_dir

    global _CONFIG_DIR
    if _CONFIG_DIR is None or not (Path(_CONFIG_DIR) / "config.json").exists():
        config = json.loads((data_dir() / "models" / "llama-3.1-8b.json").read_text())["config"]
        folder = tempfile.mkdtemp(prefix="kvlib-vllm-config-")
        (Path(folder) / "config.json").write_text(json.dumps(config))
        _CONFIG_DIR = folder
    return _CONFIG_DIR


_CONFIG_DIR: str | None = None


def vllm_serving_run(requests: Any, arrival_s: Any, *, pool_blocks: int, block_size: int = 16,
                     step_time: Any, max_num_seqs: int = 256,
                     max_num_batched_tokens: int = 8192,
                     prompt_token_ids: Sequence[Any] | None = None) -> Any:
    """``kvlib.simulate_serving``'s run, scheduled by vLLM 0.33's own v1 ``Scheduler`` on the CPU.

    ``prompt_token_ids`` (one token-id sequence per request, ids below 100,000) turns on vLLM's
    prefix caching (``enable_prefix_caching``, sha256 block hashes); request i then samples
    token 100,000 + i every step, so no two requests' output blocks hash alike, and the run's
    ``cached_tokens`` holds each request's hit at its first admission. Without them prompts are
    all token 1 and prefix caching is off.

    Before each ``schedule()`` every request whose arrival has passed is added; after it the
    virtual clock advances by ``step_time`` of the batch — (tokens scheduled, tokens computed
    before the step) per scheduled request, running requests first — and every request whose
    computed tokens reached its length samples one token (token id 0). With nothing unfinished
    the clock jumps to the next arrival. Needs ``VLLM_TARGET_DEVICE=cpu`` (set here if unset).
    """
    _cpu_environment()
    import torch
    from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.sampling_params import SamplingParams
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.request import Request
    from vllm.v1.structured_output import StructuredOutputManager

    from .scheduler import ServingRun, check_serving_inputs

    prompt, output, arrival = check_serving_inputs(requests, arrival_s)
    block_size = positive_integer("block_size", block_size)
    pool_blocks = positive_integer("pool_blocks", pool_blocks)
    n = len(prompt)
    max_model_len = int((prompt + output).max()) + block_size
    sched_config = SchedulerConfig(max_num_seqs=max_num_seqs,
                                   max_num_batched_tokens=max_num_batched_tokens,
                                   max_model_len=max_model_len, enable_chunked_prefill=True,
                                   is_encoder_decoder=False)
    model_config = ModelConfig(model=_llama_config_dir(), dtype="bfloat16",
                               skip_tokenizer_init=True, max_model_len=max_model_len)
    caching = prompt_token_ids is not None
    if caching:
        tokens = [np.asarray(t, dtype=np.int64).tolist() for t in prompt_token_ids]
        if [len(t) for t in tokens] != prompt.tolist():
            raise ValueError("prompt_token_ids must hold each request's prompt tokens")
        from vllm.utils.hashing import sha256
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash

        init_none_hash(sha256)
        hasher = get_request_block_hasher(block_size, sha256)
    cache_config = CacheConfig(block_size=block_size, cache_dtype="auto",
                               enable_prefix_caching=caching)
    cache_config.num_gpu_blocks = pool_blocks + 1
    vllm_config = VllmConfig(model_config=model_config, cache_config=cache_config,
                             scheduler_config=sched_config)
    spec = FullAttentionSpec(block_size=block_size, num_kv_heads=8, head_size=128,
                             dtype=torch.bfloat16)
    kv_config = KVCacheConfig(num_blocks=pool_blocks + 1, kv_cache_tensors=[],
                              kv_cache_groups=[KVCacheGroupSpec(["layer0"], spec)])
    s = Scheduler(vllm_config=vllm_config, kv_cache_config=kv_config,
                  structured_output_manager=StructuredOutputManager(vllm_config),
                  block_size=block_size)
    first = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    last = np.zeros(n)
    cached = np.full(n, -1, dtype=np.int64)
    itls: list[float] = []
    clock = float(arrival[0])
    nxt, steps, done = 0, 0, 0
    seen: list[Any] = []
    while done < n:
        while nxt < n and arrival[nxt] <= clock:
            req = Request(str(nxt), tokens[nxt] if caching else [1] * int(prompt[nxt]),
                          SamplingParams(max_tokens=int(output[nxt]), ignore_eos=True),
                          None, arrival_time=float(arrival[nxt]),
                          block_hasher=hasher if caching else None)
            seen.append(req)
            s.add_request(req)
            nxt += 1
        if s.get_num_unfinished_requests() == 0:
            clock = max(clock, float(arrival[nxt]))
            continue
        out = s.schedule()
        scheduled = out.num_scheduled_tokens
        if not scheduled:
            raise RuntimeError("vLLM's scheduler scheduled nothing")
        batch = np.array([(t, s.requests[rid].num_computed_tokens - t)    # computed before
                          for rid, t in scheduled.items()], dtype=np.int64)
        for rid, t in scheduled.items():
            if cached[int(rid)] < 0:
                cached[int(rid)] = s.requests[rid].num_computed_tokens - t
        clock += float(step_time(batch))
        steps += 1
        all_ids = list(scheduled)
        ids = [rid for rid in all_ids
               if s.requests[rid].num_computed_tokens >= s.requests[rid].num_tokens]
        sampling = set(ids)
        mro = ModelRunnerOutput(req_ids=all_ids,
                                req_id_to_index={r: i for i, r in enumerate(all_ids)},
                                sampled_token_ids=[[100_000 + int(r) if caching else 0]
                                                   if r in sampling else []
                                                   for r in all_ids])
        for rid in ids:
            i = int(rid)
            if np.isnan(first[i]):
                first[i] = clock
            else:
                itls.append(clock - last[i])
            last[i] = clock
            if s.requests[rid].num_output_tokens + 1 >= output[i]:
                finish[i] = clock
                done += 1
        s.update_from_output(out, mro)
    multi = output > 1
    tpot = np.zeros(n)
    tpot[multi] = (finish[multi] - first[multi]) / (output[multi] - 1)
    preemptions = sum(r.num_preemptions for r in seen)
    itl = np.asarray(itls)
    return ServingRun(prompt, output, arrival, first - arrival, tpot, finish - arrival, itl,
                      np.ones(len(itl), dtype=np.int64), preemptions, steps,
                      float(finish.max() - arrival[0]), cached if caching else None)
