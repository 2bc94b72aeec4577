// ws_accum: accumulator memory and result adder at the bottom of the array.
//
// A reduction longer than ROWS is split into K folds that reach this stage one after
// the other with the same row numbering: the first fold stores its rows, later folds
// add to them (in_add), and the last fold adds and sends the row out (in_emit) instead
// of storing it. So the host never adds partial sums. The memory needs no reset (so the
// module has no rst): a row is always stored before it is read back (the driver's tile
// order guarantees it), and the result valid comes from ws_ctrl's reset tag line.
module ws_accum #(
    parameter integer COLS      = 4,
    parameter integer ACC_W     = 32,
    parameter integer ACC_DEPTH = 1024,
    parameter integer FP        = 0     // 1: binary32 sums (fp32_add)
) (
    input  wire                  clk,
    input  wire                  en,
    input  wire                  in_valid,
    input  wire [$clog2(ACC_DEPTH)-1:0] in_row,
    input  wire                  in_add,
    input  wire                  in_emit,
    input  wire [COLS*ACC_W-1:0] in_data,
    output wire                  r_valid,
    output wire [COLS*ACC_W-1:0] r_data
);
    reg  [COLS*ACC_W-1:0] acc_mem [0:ACC_DEPTH-1];
    wire [COLS*ACC_W-1:0] stored = acc_mem[in_row];
    wire [COLS*ACC_W-1:0] added;
    wire [COLS*ACC_W-1:0] sum = in_add ? added : in_data;

    genvar c;
    generate
        for (c = 0; c < COLS; c = c + 1) begin : g_col
            if (FP != 0) begin : g_fp
                // the fold's sum plus the stored sum, rounded once (binary32)
                fp32_add add (.a(in_data[c*ACC_W +: ACC_W]), .b(stored[c*ACC_W +: ACC_W]),
                              .y(added[c*ACC_W +: ACC_W]));
            end else begin : g_int
                // per-column add, wrapping modulo 2^ACC_W like the PEs
                assign added[c*ACC_W +: ACC_W] = in_data[c*ACC_W +: ACC_W]
                                               + stored[c*ACC_W +: ACC_W];
            end
        end
    endgenerate

    // The result is not registered again: the de-skew stage and the tag line in front of
    // this adder are registers already, and one more stage would cost a cycle of latency
    // on every GEMM. While the result waits (r_valid && !r_ready) ws_top freezes every
    // register, so r_valid and r_data stay stable as the valid/ready rules require.
    assign r_valid = in_valid && in_emit;
    assign r_data  = sum;

    always @(posedge clk) begin
        if (en && in_valid && !in_emit) acc_mem[in_row] <= sum;
    end
endmodule
