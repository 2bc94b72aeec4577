// ws_pe: one processing element of the weight-stationary systolic array.
//
// The PE keeps two weights (bank 0 and bank 1) so the next tile's weight can be
// written while the current tile still streams through; every activation carries
// the bank it must be multiplied with (sel), so the switch from one tile to the next
// travels through the array with the activation wavefront instead of needing a
// global, array-wide swap.
//
// Weights reach a PE through a per-column shift chain (w_in -> w_chain -> the PE
// below). The chain is separate from the banks: loading the next tile never disturbs
// the weights in use. w_commit copies the chain's *next* value into bank w_bank, so the
// commit can coincide with the tile's last weight beat (and with the tile's first
// activation, through the bypass below).
//
// With FP = 1 the operands and partial sums are IEEE-754 binary32 (IN_W = ACC_W = 32):
// the PE multiplies (fp32_mul) and then adds (fp32_add), each rounded to nearest even,
// not fused, both combinational between the same registers as the integer MAC, so the PE
// still takes one cycle and the array's timing is the same for both element types.
//
// All state advances only when en is high: the whole array freezes for one cycle when
// the result stream is back-pressured (see ws_top).
module ws_pe #(
    parameter integer IN_W  = 8,   // signed activation / weight width
    parameter integer ACC_W = 32,  // partial-sum width; wraps modulo 2^ACC_W
    parameter integer FP    = 0    // 1: binary32 operands and sums (IN_W = ACC_W = 32)
) (
    input  wire                    clk,
    input  wire                    rst,        // synchronous, active high
    input  wire                    en,         // advance one step
    // activation from the left neighbour, forwarded to the right one
    input  wire signed [IN_W-1:0]  a_in,
    input  wire                    sel_in,     // weight bank this activation uses
    output reg  signed [IN_W-1:0]  a_out,
    output reg                     sel_out,
    // partial sum from the PE above, forwarded (plus a*w) to the PE below
    input  wire        [ACC_W-1:0] psum_in,
    output reg         [ACC_W-1:0] psum_out,
    // weight shift chain and column-wide load controls
    input  wire        [IN_W-1:0]  w_in,
    input  wire                    w_shift,    // chain moves down one row
    input  wire                    w_commit,   // chain's next value -> bank w_bank
    input  wire                    w_bank,
    output reg         [IN_W-1:0]  w_chain     // this PE's chain register (feeds the PE below)
);
    reg signed [IN_W-1:0] w_bank0;
    reg signed [IN_W-1:0] w_bank1;

    wire        [IN_W-1:0]    w_chain_next = w_shift ? w_in : w_chain;
    // A commit in this very cycle bypasses to the multiplier, so the first activation of
    // a tile may enter in the same cycle as its tile's last weight beat. The controller
    // keeps the previous tile of that bank at least one cycle clear of the commit.
    wire                      bypass       = w_commit && (w_bank == sel_in);
    wire signed [IN_W-1:0]    w_used       = bypass ? w_chain_next : (sel_in ? w_bank1 : w_bank0);
    wire        [ACC_W-1:0]   psum_next;
    generate
        if (FP != 0) begin : g_fp
            wire [31:0] product;
            fp32_mul mul (.a(a_in), .b(w_used), .y(product));
            fp32_add add (.a(psum_in), .b(product), .y(psum_next));
        end else begin : g_int
            wire signed [2*IN_W-1:0] product = a_in * w_used;
            // Assigning a signed value to a wider signed net sign-extends it (ACC_W >=
            // 2*IN_W); the widening is the point, so Verilator's width warning is waived.
            /* verilator lint_off WIDTHEXPAND */
            wire signed [ACC_W-1:0]  product_ext = product;
            /* verilator lint_on WIDTHEXPAND */
            assign psum_next = psum_in + product_ext;   // two's-complement wrap at ACC_W
        end
    endgenerate

    always @(posedge clk) begin
        if (rst) begin
            a_out    <= {IN_W{1'b0}};
            sel_out  <= 1'b0;
            psum_out <= {ACC_W{1'b0}};
            w_chain  <= {IN_W{1'b0}};
            w_bank0  <= {IN_W{1'b0}};
            w_bank1  <= {IN_W{1'b0}};
        end else if (en) begin
            a_out    <= a_in;
            sel_out  <= sel_in;
            psum_out <= psum_next;
            w_chain  <= w_chain_next;
            if (w_commit && !w_bank) w_bank0 <= w_chain_next;
            if (w_commit &&  w_bank) w_bank1 <= w_chain_next;
        end
    end
endmodule
