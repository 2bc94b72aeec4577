// ws_array: ROWS x COLS grid of ws_pe, without any skewing (see ws_top).
//
// Inputs are expected already skewed: row r's activation one cycle after row r-1's,
// column c's weight controls and top partial sum one cycle after column c-1's. With
// that, PE(r,c) sees the activation injected at cycle t at cycle t+r+c, and the
// matching partial sum arrives from above in the same cycle.
//
// Weights: each column's chain shifts W_LOAD rows a beat (a PE takes the chain register
// of the PE W_LOAD rows above; the top W_LOAD PEs take w_in), so a tile's ROWS weight
// rows load in ROWS / W_LOAD beats. w_in carries a beat's W_LOAD rows in the scratchpad's
// order (the tile's bottom row first): row k of the beat, at [(k*COLS + c)*IN_W], enters
// the chain at row W_LOAD-1-k, and after the tile's last beat the row that entered first
// is at the bottom. W_LOAD = 1: one chain a row a beat.
module ws_array #(
    parameter integer ROWS  = 4,
    parameter integer COLS  = 4,
    parameter integer IN_W  = 8,
    parameter integer ACC_W = 32,
    parameter integer FP    = 0,    // 1: binary32 PEs (see ws_pe)
    parameter integer W_LOAD = 1    // weight rows a beat (a power of two dividing ROWS)
) (
    input  wire                  clk,
    input  wire                  rst,
    input  wire                  en,
    input  wire [ROWS*IN_W-1:0]  a_in,       // row r at [r*IN_W +: IN_W]
    input  wire [ROWS-1:0]       sel_in,
    input  wire [W_LOAD*COLS*IN_W-1:0] w_in, // beat row k, column c at [(k*COLS+c)*IN_W]
    input  wire [COLS-1:0]       w_shift,
    input  wire [COLS-1:0]       w_commit,
    input  wire [COLS-1:0]       w_bank,
    input  wire [COLS*ACC_W-1:0] psum_top,   // added at the top of each column (D)
    output wire [COLS*ACC_W-1:0] psum_bottom
);
    // Links between neighbours. Index COLS (right edge) and ROWS (bottom edge) hold
    // what the last PEs forward; the right and bottom edges are not used further.
    /* verilator lint_off UNUSEDSIGNAL */
    wire [IN_W-1:0]  a_link   [0:ROWS-1][0:COLS];
    wire             sel_link [0:ROWS-1][0:COLS];
    wire [IN_W-1:0]  w_link   [1:ROWS][0:COLS-1];   // [r+1]: PE r's chain register
    /* verilator lint_on UNUSEDSIGNAL */
    wire [ACC_W-1:0] p_link   [0:ROWS][0:COLS-1];
    wire [IN_W-1:0]  w_feed   [0:ROWS-1][0:COLS-1];  // what PE r's chain takes

    genvar r, c;
    generate
        for (r = 0; r < ROWS; r = r + 1) begin : g_row_in
            assign a_link[r][0]   = a_in[r*IN_W +: IN_W];
            assign sel_link[r][0] = sel_in[r];
        end
        for (c = 0; c < COLS; c = c + 1) begin : g_col_io
            assign p_link[0][c] = psum_top[c*ACC_W +: ACC_W];
            assign psum_bottom[c*ACC_W +: ACC_W] = p_link[ROWS][c];
        end
        for (r = 0; r < ROWS; r = r + 1) begin : g_feed
            for (c = 0; c < COLS; c = c + 1) begin : g_feed_col
                if (r < W_LOAD) begin : g_top
                    assign w_feed[r][c] = w_in[((W_LOAD-1-r)*COLS + c)*IN_W +: IN_W];
                end else begin : g_chain
                    assign w_feed[r][c] = w_link[r+1-W_LOAD][c];
                end
            end
        end
        for (r = 0; r < ROWS; r = r + 1) begin : g_row
            for (c = 0; c < COLS; c = c + 1) begin : g_col
                ws_pe #(.IN_W(IN_W), .ACC_W(ACC_W), .FP(FP)) pe (
                    .clk(clk), .rst(rst), .en(en),
                    .a_in(a_link[r][c]), .sel_in(sel_link[r][c]),
                    .a_out(a_link[r][c+1]), .sel_out(sel_link[r][c+1]),
                    .psum_in(p_link[r][c]), .psum_out(p_link[r+1][c]),
                    .w_in(w_feed[r][c]), .w_shift(w_shift[c]),
                    .w_commit(w_commit[c]), .w_bank(w_bank[c]),
                    .w_chain(w_link[r+1][c])
                );
            end
        end
    endgenerate
endmodule
