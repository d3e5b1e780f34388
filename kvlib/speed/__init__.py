"""The speed model: the step-time law of one engine step (decode, prefill, mixed) on a GPU group.
Imports ``core``, ``model``, ``hardware``, ``kvlib.deployment`` and ``engines``."""
