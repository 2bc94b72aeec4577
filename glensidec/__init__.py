"""glensidec: a compiler for Glenside tensor programs onto a weight-stationary systolic array."""

__version__ = "0.1.0"
