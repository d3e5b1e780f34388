"""kvlib — the arithmetic of the KV-cache economics book.

Bytes internally; KiB/GiB (binary) or KB/GB (decimal) only at display, always named.
"""
from .allocator import (POLICIES, BlockAllocator, ContiguousAllocator, OutOfBlocksError,
                        SimResult, prefix_reuse_lost, reserved_tokens, simulate)
from .layers import (AttentionLayer, GatedDeltaNetLayer, Mamba2Layer, MLALayer,
                     StatelessLayer, heads_per_gpu)
from .model import Model, model_from_layers
from .registry import data_dir, load_model, model_record, model_slugs, registry_table
from .units import DTYPE_BITS, GB, GIB, KB, KIB, MB, MIB, dtype_bytes

__all__ = [
    "POLICIES", "BlockAllocator", "ContiguousAllocator", "OutOfBlocksError", "SimResult",
    "prefix_reuse_lost", "reserved_tokens", "simulate",
    "AttentionLayer", "GatedDeltaNetLayer", "Mamba2Layer", "MLALayer", "StatelessLayer",
    "heads_per_gpu", "Model", "model_from_layers", "data_dir", "load_model", "model_record",
    "model_slugs", "registry_table", "DTYPE_BITS", "GB", "GIB", "KB", "KIB", "MB", "MIB",
    "dtype_bytes",
]
