"""GPUs with their memory, bandwidth, FLOP/s and interconnect, measured all-reduce latency, and
dated prices. Imports only ``kvlib.core``."""
from .gpus import (GPU, AllReduceLatency, allreduce_latency, gpu_slugs, gpu_table,
                   load_gpu, load_prices, price_per_gpu_hour, resolve_gpu)

__all__ = ["GPU", "AllReduceLatency", "allreduce_latency", "gpu_slugs", "gpu_table",
           "load_gpu", "load_prices", "price_per_gpu_hour", "resolve_gpu"]
