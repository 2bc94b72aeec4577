"""pytest entry for fp32_mul: random and edge-case products against numpy's float32."""

from __future__ import annotations

from cycle_bench import params_env
from sim_harness import SIMULATOR, WAVES, build_dir, run_cocotb

from glensidec.cosim import rtl_build

LANES = 8  # small: the build of many lanes of combinational logic is what costs


def test_fp32_mul() -> None:
    parameters = {"LANES": LANES, "OP": 0}
    # A combinational wrapper driven through its ports: public ports, no --timing.
    runner = rtl_build.build("tb_fp32_lanes", rtl_build.rtl_sources("tb_fp32_lanes"),
                             build_dir("fp32_mul"), parameters, simulator=SIMULATOR,
                             waves=WAVES, public_ports=True)
    run_cocotb(runner, "tb_fp32_lanes", "cocotb_fp32", "random_vectors", params_env(parameters))
