"""The target: the systolic array's configuration, its cycle-exact timing model and its
bit-exact reference arithmetic. Rewriting, extraction, code generation and co-simulation all
read the hardware through this package; it imports nothing else of glensidec."""
