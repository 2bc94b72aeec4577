"""Simulation: building the Verilog with Verilator, driving it with cocotb, and co-simulating
a compiled program with every array call on the RTL (`python -m glensidec.cosim`)."""
