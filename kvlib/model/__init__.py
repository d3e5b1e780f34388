"""A model as it is cached: KV and weight formats, the one ``config.json`` reader, one class per
layer kind, parameter counts, the registry, weights as engines load them, and the cross-check
against transformers. Imports only ``kvlib.core``."""
