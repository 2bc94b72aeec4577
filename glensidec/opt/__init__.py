"""Optimisation: equality saturation in egglog (rewrite) and extraction of the program the
array runs fastest by the cycle model (extract)."""
