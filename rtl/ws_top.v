// ws_top: weight-stationary systolic array with valid/ready streams.
//
//   C[M x COLS] = A[M x ROWS] . W[ROWS x COLS] (+ D) (+ accumulator), int8 in, int32 out
//   (FP = 1: binary32 in and out, every multiply and add rounded to nearest even)
//
// Streams (a beat moves when valid && ready on a rising clock edge):
//   w_*  weights, ROWS/W_LOAD beats per tile, W_LOAD rows of COLS weights per beat (row k
//        of a beat at [k*COLS*IN_W]), bottom row first
//   a_*  activations, one row of ROWS values per beat plus per-row flags (and the
//        accumulator row of the tile's first row: row i of a tile is a_acc_row + i)
//   d_*  D (bias or partial sum) rows, consumed with activation rows that set a_use_d
//   r_*  results, one row of COLS accumulators per beat, for rows that set a_emit
// The weights of the next tile load while the current tile streams (two weight banks).
// Back-pressure on r_ready freezes the whole pipeline for that cycle (en); input gaps
// simply leave bubbles in it. See docs/hardware.md for timing.
module ws_top #(
    parameter integer ROWS      = 4,
    parameter integer COLS      = 4,
    parameter integer IN_W      = 8,
    parameter integer ACC_W     = 32,
    parameter integer ACC_DEPTH = 1024,   // accumulator rows (>= 2)
    parameter integer FP        = 0,      // 1: IEEE-754 binary32 elements (IN_W = ACC_W = 32)
    parameter integer W_LOAD    = 1       // weight rows a beat (a power of two dividing ROWS)
) (
    input  wire                  clk,
    input  wire                  rst,      // synchronous, active high
    input  wire                  w_valid,
    output wire                  w_ready,
    input  wire [W_LOAD*COLS*IN_W-1:0] w_data, // beat row k, column c at [(k*COLS+c)*IN_W]
    input  wire                  a_valid,
    output wire                  a_ready,
    input  wire [ROWS*IN_W-1:0]  a_data,   // row r (= reduction index) at [r*IN_W +: IN_W]
    input  wire                  a_last,
    input  wire                  a_add,
    input  wire                  a_emit,
    input  wire                  a_use_d,
    input  wire [$clog2(ACC_DEPTH)-1:0] a_acc_row,  // accumulator row of the tile's first row
    input  wire                  d_valid,
    output wire                  d_ready,
    input  wire [COLS*ACC_W-1:0] d_data,
    output wire                  r_valid,
    input  wire                  r_ready,
    output wire [COLS*ACC_W-1:0] r_data
);
    // The pipeline advances unless a result is waiting and nobody takes it.
    wire en = !(r_valid && !r_ready);

    wire                          w_shift, w_commit, w_bank, a_sel, d_inject;
    wire                          acc_valid, acc_add, acc_emit;
    wire [$clog2(ACC_DEPTH)-1:0]  acc_row;

    ws_ctrl #(.ROWS(ROWS), .COLS(COLS), .ACC_DEPTH(ACC_DEPTH), .W_LOAD(W_LOAD)) ctrl (
        .clk(clk), .rst(rst), .en(en),
        .w_valid(w_valid), .w_ready(w_ready),
        .w_shift(w_shift), .w_commit(w_commit), .w_bank(w_bank),
        .a_valid(a_valid), .a_ready(a_ready), .a_last(a_last), .a_add(a_add),
        .a_emit(a_emit), .a_use_d(a_use_d), .a_acc_row(a_acc_row),
        .d_valid(d_valid), .d_ready(d_ready),
        .a_sel(a_sel), .d_inject(d_inject),
        .acc_valid(acc_valid), .acc_row(acc_row), .acc_add(acc_add), .acc_emit(acc_emit)
    );

    // Pack each skew lane as {controls, data} so one skew buffer delays both together
    // (a weight lane: column c's W_LOAD weights of the beat and its three controls).
    localparam integer WL = W_LOAD * IN_W + 3;
    wire [ROWS*(IN_W+1)-1:0] a_lanes, a_lanes_skewed;
    wire [COLS*WL-1:0]       w_lanes, w_lanes_skewed;
    wire [COLS*ACC_W-1:0]    d_lanes, d_lanes_skewed;
    wire [ROWS*IN_W-1:0]     a_skewed;
    wire [ROWS-1:0]          sel_skewed;
    wire [W_LOAD*COLS*IN_W-1:0] w_skewed;
    wire [COLS-1:0]          w_shift_skewed, w_commit_skewed, w_bank_skewed;
    wire [COLS*ACC_W-1:0]    psum_bottom, result_row;

    genvar r, c, k;
    generate
        for (r = 0; r < ROWS; r = r + 1) begin : g_a_lane
            assign a_lanes[r*(IN_W+1) +: IN_W+1] = {a_sel, a_data[r*IN_W +: IN_W]};
            assign {sel_skewed[r], a_skewed[r*IN_W +: IN_W]} = a_lanes_skewed[r*(IN_W+1) +: IN_W+1];
        end
        for (c = 0; c < COLS; c = c + 1) begin : g_w_lane
            assign w_lanes[c*WL + W_LOAD*IN_W +: 3] = {w_bank, w_commit, w_shift};
            assign {w_bank_skewed[c], w_commit_skewed[c], w_shift_skewed[c]}
                = w_lanes_skewed[c*WL + W_LOAD*IN_W +: 3];
            for (k = 0; k < W_LOAD; k = k + 1) begin : g_w_row
                assign w_lanes[c*WL + k*IN_W +: IN_W] = w_data[(k*COLS + c)*IN_W +: IN_W];
                assign w_skewed[(k*COLS + c)*IN_W +: IN_W] = w_lanes_skewed[c*WL + k*IN_W +: IN_W];
            end
        end
    endgenerate
    // Rows without D start their columns from zero.
    assign d_lanes = d_inject ? d_data : {COLS*ACC_W{1'b0}};

    ws_skew #(.LANES(ROWS), .WIDTH(IN_W+1), .REVERSE(0)) a_skew (
        .clk(clk), .rst(rst), .en(en), .din(a_lanes), .dout(a_lanes_skewed));
    ws_skew #(.LANES(COLS), .WIDTH(WL), .REVERSE(0)) w_skew (
        .clk(clk), .rst(rst), .en(en), .din(w_lanes), .dout(w_lanes_skewed));
    ws_skew #(.LANES(COLS), .WIDTH(ACC_W), .REVERSE(0)) d_skew (
        .clk(clk), .rst(rst), .en(en), .din(d_lanes), .dout(d_lanes_skewed));

    ws_array #(.ROWS(ROWS), .COLS(COLS), .IN_W(IN_W), .ACC_W(ACC_W), .FP(FP),
               .W_LOAD(W_LOAD)) array (
        .clk(clk), .rst(rst), .en(en),
        .a_in(a_skewed), .sel_in(sel_skewed),
        .w_in(w_skewed), .w_shift(w_shift_skewed), .w_commit(w_commit_skewed),
        .w_bank(w_bank_skewed), .psum_top(d_lanes_skewed), .psum_bottom(psum_bottom)
    );

    // Column c leaves the array c cycles after column 0: delay it COLS-1-c more.
    ws_skew #(.LANES(COLS), .WIDTH(ACC_W), .REVERSE(1)) deskew (
        .clk(clk), .rst(rst), .en(en), .din(psum_bottom), .dout(result_row));

    ws_accum #(.COLS(COLS), .ACC_W(ACC_W), .ACC_DEPTH(ACC_DEPTH), .FP(FP)) accum (
        .clk(clk), .en(en),
        .in_valid(acc_valid), .in_row(acc_row), .in_add(acc_add), .in_emit(acc_emit),
        .in_data(result_row), .r_valid(r_valid), .r_data(r_data)
    );
endmodule
