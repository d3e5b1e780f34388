"""kvlib — the arithmetic of the KV-cache economics book.

Bytes internally; KiB/GiB (binary) or KB/GB (decimal) only at display, always named.

The package is layered; a layer imports only the layers before it (``tests/test_layers_import.py``
walks every import, function-level ones too):

    core → model → hardware → deployment → engines → speed → fit → serve → report

Every public name is importable from here (``kvlib.kv_pool``, ``kvlib.Deployment``, …).
"""
from .core.units import DTYPE_BITS, GB, GIB, KB, KIB, MB, MIB, dtype_bytes
from .model.formats import FORMATS as KV_FORMATS
from .model.formats import KVFormat, WeightFormat, kv_format, weight_format
from .model.layers import (AttentionLayer, GatedDeltaNetLayer, IndexerKeyLayer,
                           LightningAttentionLayer, Mamba1Layer, Mamba2Layer, MLALayer,
                           SharedKVLayer, StatelessLayer, heads_per_gpu,
                           mamba_groups_per_gpu, split_evenly)
from .model.model import Model, model_from_layers
from .model.params import ParamCounts, count_params, weight_bytes
from .model.registry import (data_dir, load_model, model_record, model_slugs, registry_table,
                             resolve_model)
from .model.weights import loaded_weights, params_for
from .hardware.gpus import GPU, gpu_slugs, load_gpu, load_prices, resolve_gpu
from .deployment import Deployment, Speculative
from .engines.allocator import (ALLOCATORS, POLICIES, BlockAllocator, BuddyAllocator,
                                ContiguousAllocator, OutOfBlocksError, SimResult,
                                prefix_reuse_lost, reserved_tokens, simulate)
from .engines.capacity import NO_OVERHEADS, VLLM, NoKVMemory, Overheads, Pool, pool_arithmetic
from .engines.launch import LaunchCommand, launch_command
from .engines.pools import engine_comparison, kv_pool
from .engines.prefix import BlockTrace, PrefixReplay, replay_prefix_cache
from .engines.scheduler import ServingRun, simulate_serving
from .speed.roofline import (CALIBRATED, DATASHEET, Efficiency, Step, critical_batch,
                             decode_step, prefill_step, step_time)
from .serve.cost import (cost_per_million_tokens, dollars_per_hour_for_cost,
                         tokens_per_second_for_cost)
from .serve.load import SLO, SLOCapacity, bench_serve, max_rate_at_slo
from .serve.prefix_cost import input_cost_per_million
from .serve.routing import route_requests
from .serve.speculative import SpeculativeDecode, speculative_decode
from .serve.serving import BatchTooLarge, DoesNotFit, ServingPoint, serving_point
from .report.recheck import VERDICTS, recheck, recheck_all

__all__ = [
    "DTYPE_BITS", "GB", "GIB", "KB", "KIB", "MB", "MIB", "dtype_bytes",
    "KV_FORMATS", "KVFormat", "WeightFormat", "kv_format", "weight_format",
    "AttentionLayer", "GatedDeltaNetLayer", "IndexerKeyLayer", "LightningAttentionLayer",
    "Mamba1Layer", "Mamba2Layer",
    "MLALayer", "SharedKVLayer", "StatelessLayer", "heads_per_gpu", "mamba_groups_per_gpu", "split_evenly",
    "Model", "model_from_layers", "ParamCounts", "count_params", "weight_bytes",
    "data_dir", "load_model", "model_record", "model_slugs", "registry_table", "resolve_model",
    "loaded_weights", "params_for",
    "GPU", "gpu_slugs", "load_gpu", "load_prices", "resolve_gpu",
    "Deployment", "Speculative",
    "ALLOCATORS", "POLICIES", "BlockAllocator", "BuddyAllocator", "ContiguousAllocator",
    "OutOfBlocksError", "SimResult", "prefix_reuse_lost", "reserved_tokens", "simulate",
    "NO_OVERHEADS", "VLLM", "NoKVMemory", "Overheads", "Pool", "kv_pool", "pool_arithmetic",
    "engine_comparison",
    "LaunchCommand", "launch_command",
    "BlockTrace", "PrefixReplay", "replay_prefix_cache", "ServingRun", "simulate_serving",
    "CALIBRATED", "DATASHEET", "Efficiency", "Step", "critical_batch", "decode_step",
    "prefill_step", "step_time",
    "cost_per_million_tokens", "dollars_per_hour_for_cost", "tokens_per_second_for_cost",
    "input_cost_per_million", "route_requests",
    "SLO", "SLOCapacity", "bench_serve", "max_rate_at_slo",
    "SpeculativeDecode", "speculative_decode",
    "BatchTooLarge", "DoesNotFit", "ServingPoint", "serving_point",
    "VERDICTS", "recheck", "recheck_all",
]
