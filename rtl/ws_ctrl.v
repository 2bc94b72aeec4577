// ws_ctrl: the stream controller of the weight-stationary array.
//
// Weights: a tile is ROWS/W_LOAD beats (W_LOAD rows of COLS weights each, the beat with
// the bottom row first; ws_array shifts its chains W_LOAD rows a beat). Every accepted beat shifts the column chains; the ROWS-th beat also
// commits the chains into the weight bank the tile was assigned (banks alternate
// 0,1,0,...). That last beat waits until the bank is free: its previous tile's last
// activation row was injected at least ROWS cycles earlier, so that activation has
// passed every row of the array (ROWS-1 cycles) and is clear of the PEs' commit
// bypass (1 cycle) before the bank changes under it.
//
// Activations: tile j uses bank j%2 and may start in the cycle its bank is committed
// (the PEs bypass the committing weight to the multiplier) or any cycle after;
// a_last marks its last row and hands the bank back. When a row asks for D (a_use_d),
// the activation and D streams are joined: both move together or not at all.
//
// Row bookkeeping (valid, accumulator row, add/emit flags) does not travel through the
// PEs: every injected row reaches the bottom of the array exactly LAT cycles later, so
// a delay line of LAT stages carries it to the accumulator. A tile's row i goes to
// accumulator row a_acc_row + i (a_acc_row comes with every row, like the flags), so
// several tiles' partial sums can stay side by side in the accumulator.
module ws_ctrl #(
    parameter integer ROWS      = 4,
    parameter integer COLS      = 4,
    parameter integer ACC_DEPTH = 1024,
    parameter integer W_LOAD    = 1      // weight rows a beat (a power of two dividing ROWS)
) (
    input  wire                 clk,
    input  wire                 rst,
    input  wire                 en,          // low while the result stream is stalled
    // weight stream handshake
    input  wire                 w_valid,
    output wire                 w_ready,
    output wire                 w_shift,     // unskewed column controls
    output wire                 w_commit,
    output wire                 w_bank,
    // activation + D stream handshake
    input  wire                 a_valid,
    output wire                 a_ready,
    input  wire                 a_last,      // last row of this tile
    input  wire                 a_add,       // add the accumulator row (later K folds)
    input  wire                 a_emit,      // send the row to the result stream
    input  wire                 a_use_d,     // add the D row at the top of the columns
    input  wire [$clog2(ACC_DEPTH)-1:0] a_acc_row, // accumulator row of the tile's first row
    input  wire                 d_valid,
    output wire                 d_ready,
    output wire                 a_sel,       // bank of the injected activation
    output wire                 d_inject,    // D row enters the columns this cycle
    // to the accumulator, LAT cycles after injection
    output wire                 acc_valid,
    output wire [$clog2(ACC_DEPTH)-1:0] acc_row,
    output wire                 acc_add,
    output wire                 acc_emit
);
    localparam integer LAT = ROWS + COLS - 1;           // injection -> accumulator input
    localparam integer RW  = (ROWS > 1) ? $clog2(ROWS) : 1;
    localparam integer AW  = $clog2(ACC_DEPTH);     // ACC_DEPTH >= 2
    localparam integer TAG = AW + 3;                    // {valid, add, emit, row}
    localparam integer  LAST_BEAT_I   = ROWS / W_LOAD - 1;
    localparam integer  DRAIN_START_I = ROWS - 1;       // see the bank-free rule above
    localparam [RW-1:0] LAST_BEAT     = LAST_BEAT_I[RW-1:0];
    localparam [RW-1:0] DRAIN_START   = DRAIN_START_I[RW-1:0];

    reg [RW-1:0] w_count;      // beats of the loading tile accepted so far
    reg          w_load_bank;  // bank the loading tile commits to
    reg [1:0]    bank_full;    // committed and not yet fully streamed
    reg [RW-1:0] drain0;       // cycles left before bank 0 may be overwritten
    reg [RW-1:0] drain1;
    reg          a_bank;       // bank of the streaming activation tile
    reg [AW-1:0] a_row;        // row of the streaming tile (accumulator address)

    wire w_last_beat = (w_count == LAST_BEAT);
    wire load_bank_free = !bank_full[w_load_bank]
                        && ((w_load_bank ? drain1 : drain0) == {RW{1'b0}});
    assign w_ready  = en && (!w_last_beat || load_bank_free);
    wire   w_fire   = w_valid && w_ready;
    assign w_shift  = w_fire;
    assign w_commit = w_fire && w_last_beat;
    assign w_bank   = w_load_bank;

    wire a_bank_ready = en && (bank_full[a_bank] || (w_commit && (w_bank == a_bank)));
    assign a_ready  = a_bank_ready && (!a_use_d || d_valid);
    assign d_ready  = a_bank_ready && a_valid && a_use_d;
    wire   a_fire   = a_valid && a_ready;
    assign a_sel    = a_bank;
    assign d_inject = a_fire && a_use_d;

    always @(posedge clk) begin
        if (rst) begin
            w_count     <= {RW{1'b0}};
            w_load_bank <= 1'b0;
            bank_full   <= 2'b00;
            drain0      <= {RW{1'b0}};
            drain1      <= {RW{1'b0}};
            a_bank      <= 1'b0;
            a_row       <= {AW{1'b0}};
        end else if (en) begin
            if (drain0 != {RW{1'b0}}) drain0 <= drain0 - 1'b1;
            if (drain1 != {RW{1'b0}}) drain1 <= drain1 - 1'b1;
            if (w_fire) begin
                w_count <= w_last_beat ? {RW{1'b0}} : w_count + 1'b1;
                if (w_last_beat) begin
                    w_load_bank            <= ~w_load_bank;
                    bank_full[w_load_bank] <= 1'b1;
                end
            end
            if (a_fire) begin
                a_row <= a_last ? {AW{1'b0}} : a_row + 1'b1;
                // A one-row tile may start and end in its commit cycle: this
                // assignment then overrides the commit's bank_full <= 1 above.
                if (a_last) begin
                    a_bank            <= ~a_bank;
                    bank_full[a_bank] <= 1'b0;
                    if (a_bank) drain1 <= DRAIN_START;
                    else        drain0 <= DRAIN_START;
                end
            end
        end
    end

    // Delay line: tag[0] is the row injected last cycle, tag[LAT-1] the row that
    // reaches the bottom of the array (after de-skew) this cycle.
    reg [TAG-1:0] tag [0:LAT-1];
    integer s;
    always @(posedge clk) begin
        if (rst) begin
            for (s = 0; s < LAT; s = s + 1) tag[s] <= {TAG{1'b0}};
        end else if (en) begin
            tag[0] <= {a_fire, a_add, a_emit, a_row + a_acc_row};
            for (s = 1; s < LAT; s = s + 1) tag[s] <= tag[s-1];
        end
    end
    assign {acc_valid, acc_add, acc_emit, acc_row} = tag[LAT-1];
endmodule
