"""vLLM's own KV-cache manager as an oracle for ``kvlib.prefix`` (needs ``requirements-vllm.txt``).

``vllm_prefix_hits`` drives ``vllm.v1.core.kv_cache_manager.KVCacheManager`` (vLLM 0.33.0) on the
CPU exactly as the v1 scheduler does for requests that run one after another: look up the
prefix cache, allocate the prompt's slots, then one slot per decoded token (the last sampled
token is never fed back), and free the request. It returns the tokens each request hit, for
``tests/test_prefix.py`` to compare with ``kvlib.replay_prefix_cache`` and for ``kvlib.bench``
to time. vLLM is imported on first use; nothing else in kvlib needs it.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core.checks import positive_integer


def vllm_prefix_hits(requests: Sequence[Any], *, block_size: int = 16,
                     capacity_blocks: int | None = None,
                     outputs: Sequence[Any] | None = None) -> NDArray[np.int64]:
    """Tokens vLLM's ``KVCacheManager`` serves from its prefix cache for each request, in order.

    ``capacity_blocks=None`` gives the pool one block more than all requests together hold, so
    nothing is ever evicted. Raises ValueError when a request does not fit the pool.
    """
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
