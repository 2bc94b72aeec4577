// ws_dma_store: scratchpad/epilogue rows -> main memory.
//
// Each incoming row (in_valid/in_ready, ROW_BYTES bytes, the first `length` of them
// meaningful) is written to the next generated row address (strided 2-D/3-D, as in
// ws_dma_load) as aligned BUS_BYTES-wide write beats with byte strobes, one beat per
// cycle; main memory takes a write every cycle (posted writes). A row is taken
// (in_ready) in the cycle of its last beat, so with rows always offered:
//
//   command accepted in cycle 0, beats in cycles 1..B (B = beats of all rows),
//   the next command accepted in its predecessor's last beat (gap-free).
// `cmd_done` is high in a command's last beat (its last write), for ws_accel's fence.
//
// glensidec.hardware.accel.dma_store_cycles is this count; sim/test_ws_dma_store.py checks it.
module ws_dma_store #(
    parameter integer ROW_BYTES = 16,
    parameter integer BUS_BYTES = 16,   // power of two
    parameter integer COUNT_W   = 16
) (
    input  wire                           clk,
    input  wire                           rst,   // synchronous, active high
    input  wire                           cmd_valid,
    output wire                           cmd_ready,
    input  wire [31:0]                    cmd_base,
    input  wire [$clog2(ROW_BYTES+1)-1:0] cmd_length,   // 1 .. ROW_BYTES
    input  wire [COUNT_W-1:0]             cmd_count1,
    input  wire [31:0]                    cmd_stride1,
    input  wire [COUNT_W-1:0]             cmd_count2,
    input  wire [31:0]                    cmd_stride2,
    input  wire                           in_valid,
    output wire                           in_ready,
    input  wire [ROW_BYTES*8-1:0]         in_data,
    output wire                           mem_wr_valid,
    output wire [31:0]                    mem_wr_addr,
    output reg  [BUS_BYTES*8-1:0]         mem_wr_data,
    output reg  [BUS_BYTES-1:0]           mem_wr_strb,
    output wire                           busy,
    output wire                           cmd_done
);
    localparam integer LEN_W = $clog2(ROW_BYTES + 1);
    localparam integer K_W   = $clog2(ROW_BYTES + 2);      // beat index within a row

    reg             active;
    reg [LEN_W-1:0] length;
    reg [K_W-1:0]   beat;
    wire [31:0]     row_addr;
    wire            last_row;
    /* verilator lint_off UNUSEDSIGNAL */  // no scratchpad row and no padding on this side
    wire [0:0]      unused_spad;
    wire            unused_padding;
    wire [COUNT_W-1:0] unused_left;
    /* verilator lint_on UNUSEDSIGNAL */

    wire [31:0] offset = row_addr & (BUS_BYTES - 1);
    wire [31:0] last_byte = offset + {{(32-LEN_W){1'b0}}, length} - 32'd1;
    /* verilator lint_off UNUSEDSIGNAL */  // a row spans at most ROW_BYTES + 1 beats
    wire [31:0] last_beat_full = last_byte >> $clog2(BUS_BYTES);
    /* verilator lint_on UNUSEDSIGNAL */
    wire [K_W-1:0] last_beat = last_beat_full[K_W-1:0];
    wire beat_last = beat == last_beat;
    wire cmd_last  = active && in_valid && beat_last && last_row;

    wire accept = cmd_valid && cmd_ready;
    assign cmd_ready    = !active || cmd_last;
    assign in_ready     = active && beat_last;
    assign mem_wr_valid = active && in_valid;
    assign mem_wr_addr  = (row_addr & ~(BUS_BYTES - 1)) + {{(32-K_W){1'b0}}, beat} * BUS_BYTES;
    assign busy = active;
    assign cmd_done = cmd_last;

    ws_dma_agen #(.COUNT_W(COUNT_W), .SPAD_W(1)) agen (
        .clk(clk), .start(accept), .step(active && in_valid && beat_last && !last_row),
        .step_rows(1'b1),
        .cmd_base(cmd_base), .cmd_count1(cmd_count1), .cmd_stride1(cmd_stride1),
        .cmd_count2(cmd_count2), .cmd_stride2(cmd_stride2), .cmd_spad_row(1'b0),
        .cmd_bounds(1'b0), .cmd_y0(16'd0), .cmd_y_step(16'd0), .cmd_height(16'd0),
        .cmd_x0(16'd0), .cmd_x_step(16'd0), .cmd_width(16'd0),
        .addr(row_addr), .spad_row(unused_spad), .padding(unused_padding), .last(last_row),
        .run_left(unused_left)
    );

    // Memory byte j of this beat is row byte k*BUS_BYTES + j - offset, when inside the row.
    integer j, src;
    always @(*) begin
        for (j = 0; j < BUS_BYTES; j = j + 1) begin
            src = {{(32-K_W){1'b0}}, beat} * BUS_BYTES + j - offset;
            if (src >= 0 && src < {{(32-LEN_W){1'b0}}, length}) begin
                mem_wr_strb[j] = 1'b1;
                mem_wr_data[j*8 +: 8] = in_data[src*8 +: 8];
            end else begin
                mem_wr_strb[j] = 1'b0;
                mem_wr_data[j*8 +: 8] = 8'd0;
            end
        end
    end

    always @(posedge clk) begin
        if (rst) begin
            active <= 1'b0;
        end else if (accept) begin
            active <= 1'b1;
        end else if (cmd_last) begin
            active <= 1'b0;
        end
        if (accept) begin
            length <= cmd_length;
            beat <= {K_W{1'b0}};
        end else if (active && in_valid) begin
            beat <= beat_last ? {K_W{1'b0}} : beat + 1'b1;
        end
    end
endmodule
