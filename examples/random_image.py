"""Write a seeded random int8 image for small_cnn.gs: python examples/random_image.py OUT.npy"""

import sys

import numpy as np

image = np.random.default_rng(0).integers(-128, 128, size=(1, 1, 16, 16)).astype(np.int8)
np.save(sys.argv[1], image)
