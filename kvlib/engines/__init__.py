"""What engines do with memory: each engine's KV pool, the paged allocator and its reference,
prefix caches, the request workloads they serve, the command that starts each engine, and
vLLM's own code as an oracle.
Imports ``core``, ``model``, ``hardware`` and ``kvlib.deployment``."""
