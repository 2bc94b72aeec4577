"""Check that result files agree bit for bit: python examples/compare.py A.npy B.npy …

Used by `make demo` to show interpreter == generated C == RTL co-simulation.
"""

import sys

import numpy as np

paths = sys.argv[1:]
results = [np.load(path) for path in paths]
for path, result in zip(paths[1:], results[1:], strict=True):
    if result.shape != results[0].shape or not np.array_equal(result, results[0]):
        sys.exit(f"MISMATCH: {path} differs from {paths[0]}")
print(f"all {len(paths)} results agree: {results[0].tolist()}")
