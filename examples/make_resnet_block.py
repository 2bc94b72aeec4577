"""Write resnet_block.npz, the weights of examples/resnet_block.gs (deterministic: seed 2027).

Run from anywhere: python examples/make_resnet_block.py
"""

from pathlib import Path

import numpy as np

CHANNELS = 16
generator = np.random.default_rng(2027)


def conv_weights() -> np.ndarray:
    return generator.integers(-8, 9, size=(CHANNELS, CHANNELS, 3, 3)).astype(np.int8)


def bias() -> np.ndarray:
    return generator.integers(-500, 501, size=(CHANNELS,)).astype(np.int32)


np.savez(
    Path(__file__).with_name("resnet_block.npz"),
    conv1_w=conv_weights(),
    conv1_b=bias(),
    conv2_w=conv_weights(),
    conv2_b=bias(),
)
