"""What a reader sees: the landing page's grid and calculator, charts (one Altair theme), tables,
the rechecked claims, the benchmark and the ``kvlib`` command. The top layer."""
