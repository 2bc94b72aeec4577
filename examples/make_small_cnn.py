"""Write small_cnn.npz, the weights of examples/small_cnn.gs (deterministic: seed 2026).

Run from anywhere: python examples/make_small_cnn.py
"""

from pathlib import Path

import numpy as np

generator = np.random.default_rng(2026)
np.savez(
    Path(__file__).with_name("small_cnn.npz"),
    conv_w=generator.integers(-8, 9, size=(8, 1, 3, 3)).astype(np.int8),
    conv_b=generator.integers(-500, 501, size=(8,)).astype(np.int32),
    dense_w=generator.integers(-8, 9, size=(10, 512)).astype(np.int8),
    dense_b=generator.integers(-2000, 2001, size=(10,)).astype(np.int32),
)
