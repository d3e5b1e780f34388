"""kvlib — the arithmetic of the KV-cache economics book.

Bytes internally; KiB/GiB (binary) or KB/GB (decimal) only at display, always named.
"""
from .capacity import NO_OVERHEADS, VLLM, Overheads, Pool, kv_pool
from .cost import cost_per_million_tokens, dollars_per_hour_for_cost, tokens_per_second_for_cost
from .hardware import GPU, gpu_slugs, load_gpu, load_prices
from .params import ParamCounts, count_params, loaded_weights, params_for, weight_bytes
from .roofline import (CALIBRATED, DATASHEET, Efficiency, Step, critical_batch, decode_step,
                       prefill_step)
from .allocator import (ALLOCATORS, POLICIES, BlockAllocator, BuddyAllocator, ContiguousAllocator,
                        OutOfBlocksError, SimResult, prefix_reuse_lost, reserved_tokens, simulate)
from .layers import (AttentionLayer, GatedDeltaNetLayer, IndexerKeyLayer, Mamba1Layer,
                     Mamba2Layer, MLALayer, StatelessLayer, heads_per_gpu, mamba_groups_per_gpu,
                     split_evenly)
from .model import Model, model_from_layers
from .prefix import BlockTrace, PrefixReplay, replay_prefix_cache
from .prefix_cost import input_cost_per_million
from .routing import route_requests
from .quant import FORMATS as KV_FORMATS, KVFormat, kv_format
from .recheck import VERDICTS, recheck_all  # kvlib.recheck(claim) is callable too
from .registry import data_dir, load_model, model_record, model_slugs, registry_table
from .units import DTYPE_BITS, GB, GIB, KB, KIB, MB, MIB, dtype_bytes

__all__ = [
    "ALLOCATORS", "POLICIES", "BlockAllocator", "BuddyAllocator", "ContiguousAllocator",
    "OutOfBlocksError", "SimResult",
    "prefix_reuse_lost", "reserved_tokens", "simulate",
    "AttentionLayer", "GatedDeltaNetLayer", "IndexerKeyLayer", "Mamba1Layer", "Mamba2Layer",
    "MLALayer", "StatelessLayer",
    "heads_per_gpu", "Model", "model_from_layers", "data_dir", "load_model", "model_record",
    "model_slugs", "registry_table", "DTYPE_BITS", "GB", "GIB", "KB", "KIB", "MB", "MIB",
    "dtype_bytes", "VERDICTS", "recheck", "recheck_all",
    "split_evenly", "mamba_groups_per_gpu", "KV_FORMATS", "KVFormat", "kv_format",
    "NO_OVERHEADS", "VLLM", "Overheads", "Pool", "kv_pool", "cost_per_million_tokens",
    "dollars_per_hour_for_cost", "tokens_per_second_for_cost", "GPU", "gpu_slugs", "load_gpu",
    "load_prices", "ParamCounts", "count_params", "params_for", "weight_bytes", "loaded_weights", "CALIBRATED",
    "DATASHEET", "Efficiency", "Step", "critical_batch", "decode_step", "prefill_step",
    "BlockTrace", "PrefixReplay", "replay_prefix_cache", "input_cost_per_million", "route_requests",
]
