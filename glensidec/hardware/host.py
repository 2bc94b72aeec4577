"""The host CPU's cycle model: what every instruction that runs on the host costs.

One model, read by extraction (`glensidec.opt.extract`, which prices host computes in the
e-graph), the compile report and `--stats` (`glensidec.backend.report.machine_cycles`, which
prices every host instruction of the lowered program) and so the NAS:

  * an elementwise, reducing or fused compute: `HOST_ELEMENT` cycles per element it reads;
  * a dot-product left on the host: `HOST_MAC` cycles per multiply-accumulate;
  * data movement: `HOST_MOVE` cycles per element a copy or fill writes (padding, im2col
    matrices, concatenations, transposes and other layout changes).

It is a unit model, not a calibrated one: one cycle for each element touched, the cost of a
scalar load-compute-store loop on an in-order core, with no credit for SIMD, caches or a
wider memcpy (a real core is faster on contiguous copies and slower on cache misses). It is
the same unit for computes and copies, so the host's share of a program's cycles compares
like with like. The array and accelerator cycles beside it are exact (the RTL's).
"""

from __future__ import annotations

HOST_ELEMENT = 1  # cycles per element an elementwise or reducing compute reads
HOST_MAC = 2  # cycles per multiply-accumulate of a dot-product on the host
HOST_MOVE = 1  # cycles per element a copy or fill writes
