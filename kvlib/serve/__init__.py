"""The serving answer: GPUs, concurrency and speed of one deployment, $ per 1M tokens, what a
prefix-cache hit saves, and cache-aware routing. Imports every layer below it."""
