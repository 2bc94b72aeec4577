// tb_fp32_lanes: simulation-only wrapper that evaluates LANES independent fp32_mul or
// fp32_add units at once (OP = 0: multiply, 1: add), so a testbench checks LANES
// vectors per write/read through VPI instead of one: per-call Python is the cost.
module tb_fp32_lanes #(
    parameter integer LANES = 64,
    parameter integer OP    = 0
) (
    input  wire [LANES*32-1:0] a,   // lane i at [i*32 +: 32]
    input  wire [LANES*32-1:0] b,
    output wire [LANES*32-1:0] y
);
    genvar i;
    generate
        for (i = 0; i < LANES; i = i + 1) begin : g_lane
            if (OP == 0) begin : g_mul
                fp32_mul unit (.a(a[i*32 +: 32]), .b(b[i*32 +: 32]), .y(y[i*32 +: 32]));
            end else begin : g_add
                fp32_add unit (.a(a[i*32 +: 32]), .b(b[i*32 +: 32]), .y(y[i*32 +: 32]));
            end
        end
    endgenerate
endmodule
