// ws_dma_load: main memory -> scratchpad, one scratchpad row per generated row.
//
// Main-memory port: one aligned read of BUS_BYTES bytes may be requested per cycle
// (mem_req_valid, mem_req_addr); its data is on mem_resp_data exactly LATENCY cycles
// later (a pipelined memory; BUS_BYTES is the bandwidth in bytes per cycle). A row of
// `length` bytes at address a costs one request per bus beat it touches; a padding row
// (im2col, outside the feature map) costs one issue cycle and no request, and is written
// as `length` copies of pad_value (the input's zero point). Bytes from `length` to
// ROW_BYTES are written as 0. A tag line of LATENCY stages carries each issue slot's row
// bookkeeping alongside the memory, so nothing ever stalls:
//
//   command accepted in cycle 0, issue slots in cycles 1..S (S = beats + padding rows),
//   the row of slot j written (wr_en) in cycle j + LATENCY + 1;
//   the next command is accepted in the previous one's last slot (gap-free).
//
// WRITE_ROWS > 1: rows that overlap or lie end to end (0 < |stride1| <= length: weight
// blocks, whole lines of a map, an input's packed taps a byte apart) are issued in groups
// of up to WRITE_ROWS rows of one line, each group's span ((n-1)*|stride1| + length bytes)
// one row's worth of beats and its rows written at once; with bounds (x_step 0 or 1) a
// group is all padding (one slot) or all inside, ws_dma_agen's runs
// (glensidec.hardware.accel.dma_groups).
//
// glensidec.hardware.accel.dma_load_cycles is this count; sim/test_ws_dma_load.py checks it.
module ws_dma_load #(
    parameter integer ROW_BYTES = 16,
    parameter integer BUS_BYTES = 16,   // power of two
    parameter integer LATENCY   = 8,    // >= 1
    parameter integer COUNT_W   = 16,
    parameter integer SPAD_W    = 14,
    parameter integer WRITE_ROWS = 1    // rows a scratchpad write may carry (power of two)
) (
    input  wire                        clk,
    input  wire                        rst,   // synchronous, active high
    input  wire                        cmd_valid,
    output wire                        cmd_ready,
    input  wire [31:0]                 cmd_base,
    input  wire [$clog2(ROW_BYTES+1)-1:0] cmd_length,   // 1 .. ROW_BYTES
    input  wire [COUNT_W-1:0]          cmd_count1,
    input  wire [31:0]                 cmd_stride1,
    input  wire [COUNT_W-1:0]          cmd_count2,
    input  wire [31:0]                 cmd_stride2,
    input  wire [SPAD_W-1:0]           cmd_spad_row,
    input  wire                        cmd_bounds,
    input  wire [15:0]                 cmd_y0,
    input  wire [15:0]                 cmd_y_step,
    input  wire [15:0]                 cmd_height,
    input  wire [15:0]                 cmd_x0,
    input  wire [15:0]                 cmd_x_step,
    input  wire [15:0]                 cmd_width,
    input  wire [7:0]                  cmd_pad_value,
    output wire                        mem_req_valid,
    output wire [31:0]                 mem_req_addr,
    input  wire [BUS_BYTES*8-1:0]      mem_resp_data,
    output reg                         wr_en,
    output reg  [SPAD_W-1:0]           wr_addr,   // the group's first row
    output reg  [$clog2(WRITE_ROWS+1)-1:0] wr_rows,  // rows written: wr_addr + 0 .. wr_rows - 1
    output reg  [WRITE_ROWS*ROW_BYTES*8-1:0] wr_data,  // row j at [j*ROW_BYTES*8 +: ROW_BYTES*8]
    output wire                        busy
);
    localparam integer LEN_W = $clog2(ROW_BYTES + 1);
    localparam integer OFF_W = (BUS_BYTES > 1) ? $clog2(BUS_BYTES) : 1;
    localparam integer G_BYTES = WRITE_ROWS * ROW_BYTES;  // a group's bytes at most
    localparam integer K_W   = $clog2(G_BYTES + 2);       // beat index within a group
    localparam integer N_W   = $clog2(WRITE_ROWS + 1);    // rows of a group
    localparam integer GL_W  = $clog2(G_BYTES + 1);       // bytes of a group
    // tag: pad, first, last, offset, beat, scratchpad row, length, rows, row step,
    // descending, pad value
    localparam integer TAG_W = 3 + OFF_W + K_W + SPAD_W + LEN_W + N_W + LEN_W + 1 + 8;

    reg               issuing;
    reg [LEN_W-1:0]   length;
    reg [7:0]         pad_value;
    reg [K_W-1:0]     beat;
    // groups of rows: rows that overlap or lie end to end (0 < |stride1| <= length), `step`
    // = |stride1| bytes apart, with bounds only at x_step 0 or 1 (ws_dma_agen's runs)
    reg               grouped, descending;
    reg [LEN_W-1:0]   step;
    wire [31:0]       row_addr;
    wire [SPAD_W-1:0] row_spad;
    wire              padding, last_row;
    /* verilator lint_off UNUSEDSIGNAL */  // only groups look at the run's rows left
    wire [COUNT_W-1:0] run_left;
    /* verilator lint_on UNUSEDSIGNAL */

    wire accept = cmd_valid && cmd_ready;
    wire [31:0] cmd_len32 = {{(32-LEN_W){1'b0}}, cmd_length};
    wire [31:0] cmd_step32 = cmd_stride1[31] ? 32'd0 - cmd_stride1 : cmd_stride1;

    // The current group: n rows (1 unless grouped), all padding or all inside, gbytes =
    // (n-1)*step + length bytes from gaddr (its lowest byte: the first row's, or with
    // descending rows the last's).
    wire [N_W-1:0] n;
    generate
        if (WRITE_ROWS == 1) begin : g_one
            assign n = 1'b1;
        end else begin : g_group
            /* verilator lint_off UNUSEDSIGNAL */
            wire [31:0] left_wide = {{(32-COUNT_W){1'b0}}, run_left};
            /* verilator lint_on UNUSEDSIGNAL */
            assign n = !grouped ? {{(N_W-1){1'b0}}, 1'b1}
                     : left_wide < WRITE_ROWS ? left_wide[N_W-1:0] : WRITE_ROWS[N_W-1:0];
        end
    endgenerate
    wire [GL_W-1:0]  gspan = ({{(GL_W-N_W){1'b0}}, n} - 1'b1) * {{(GL_W-LEN_W){1'b0}}, step};
    wire [GL_W-1:0]  gbytes = gspan + {{(GL_W-LEN_W){1'b0}}, length};
    wire [31:0]      gbytes32 = {{(32-GL_W){1'b0}}, gbytes};
    wire [31:0]      gaddr = descending ? row_addr - {{(32-GL_W){1'b0}}, gspan} : row_addr;

    // Beats the current group touches: from its aligned start to its last byte.
    wire [31:0]      offset_full = gaddr & (BUS_BYTES - 1);
    wire [OFF_W-1:0] offset = offset_full[OFF_W-1:0];
    wire [31:0]      last_byte = offset_full + gbytes32 - 32'd1;
    /* verilator lint_off UNUSEDSIGNAL */  // a group spans at most G_BYTES + 1 beats
    wire [31:0]      last_beat_full = last_byte >> $clog2(BUS_BYTES);
    /* verilator lint_on UNUSEDSIGNAL */
    wire [K_W-1:0]   last_beat = last_beat_full[K_W-1:0];
    wire slot_last   = padding || beat == last_beat;
    wire cmd_last    = issuing && slot_last && last_row;

    assign cmd_ready     = !issuing || cmd_last;
    assign mem_req_valid = issuing && !padding;
    assign mem_req_addr  = (gaddr & ~(BUS_BYTES - 1)) + {{(32-K_W){1'b0}}, beat} * BUS_BYTES;

    ws_dma_agen #(.COUNT_W(COUNT_W), .SPAD_W(SPAD_W), .STEP_W(N_W)) agen (
        .clk(clk), .start(accept), .step(issuing && slot_last && !last_row), .step_rows(n),
        .cmd_base(cmd_base), .cmd_count1(cmd_count1), .cmd_stride1(cmd_stride1),
        .cmd_count2(cmd_count2), .cmd_stride2(cmd_stride2), .cmd_spad_row(cmd_spad_row),
        .cmd_bounds(cmd_bounds), .cmd_y0(cmd_y0), .cmd_y_step(cmd_y_step),
        .cmd_height(cmd_height), .cmd_x0(cmd_x0), .cmd_x_step(cmd_x_step), .cmd_width(cmd_width),
        .addr(row_addr), .spad_row(row_spad), .padding(padding), .last(last_row),
        .run_left(run_left)
    );

    always @(posedge clk) begin
        if (rst) begin
            issuing <= 1'b0;
        end else if (accept) begin
            issuing <= 1'b1;
        end else if (cmd_last) begin
            issuing <= 1'b0;
        end
        if (accept) begin
            length <= cmd_length;
            pad_value <= cmd_pad_value;
            beat <= {K_W{1'b0}};
            grouped <= WRITE_ROWS > 1 && cmd_stride1 != 32'd0 && cmd_step32 <= cmd_len32
                      && (!cmd_bounds || cmd_x_step <= 16'd1);
            descending <= WRITE_ROWS > 1 && cmd_stride1[31];
            step <= cmd_step32[LEN_W-1:0];   // kept only when grouped (<= length)
        end else if (issuing) begin
            beat <= slot_last ? {K_W{1'b0}} : beat + 1'b1;
        end
    end

    // The tag line: slot bookkeeping delayed by LATENCY cycles, beside the memory.
    reg  [TAG_W:0] tag_line [0:LATENCY-1];   // {valid, tag}
    wire [TAG_W:0] tag_in = {issuing, padding, beat == {K_W{1'b0}}, slot_last, offset, beat,
                             row_spad, length, n, step, grouped && descending, pad_value};
    integer s;
    always @(posedge clk) begin
        for (s = LATENCY - 1; s > 0; s = s - 1) tag_line[s] <= tag_line[s-1];
        tag_line[0] <= tag_in;
        if (rst) begin
            for (s = 0; s < LATENCY; s = s + 1) tag_line[s][TAG_W] <= 1'b0;
        end
    end

    // The slot whose data is on mem_resp_data now.
    wire              out_valid, out_pad, out_first, out_last;
    wire [OFF_W-1:0]  out_offset;
    wire [K_W-1:0]    out_beat;
    wire [SPAD_W-1:0] out_spad;
    wire [LEN_W-1:0]  out_length;
    wire [N_W-1:0]    out_n;
    wire [LEN_W-1:0]  out_step;
    wire              out_descending;
    wire [7:0]        out_pad_value;
    assign {out_valid, out_pad, out_first, out_last, out_offset, out_beat, out_spad, out_length,
            out_n, out_step, out_descending, out_pad_value} = tag_line[LATENCY-1];

    // Row assembly: row j of a group starts at group byte base_j = j*step (descending:
    // (n-1-j)*step); its byte i is memory byte (group address + base_j + i), found in
    // beat k at position offset + base_j + i - k*BUS_BYTES.
    reg [WRITE_ROWS*ROW_BYTES*8-1:0] row_buf, row_next;
    integer i, j, src, base_j;
    always @(*) begin
        for (j = 0; j < WRITE_ROWS; j = j + 1) begin
            base_j = out_descending
                ? ({{(32-N_W){1'b0}}, out_n} - 1 - j) * {{(32-LEN_W){1'b0}}, out_step}
                : j * {{(32-LEN_W){1'b0}}, out_step};
            for (i = 0; i < ROW_BYTES; i = i + 1) begin
                src = {{(32-OFF_W){1'b0}}, out_offset} + base_j + i
                      - {{(32-K_W){1'b0}}, out_beat} * BUS_BYTES;
                if (i >= {{(32-LEN_W){1'b0}}, out_length}) begin
                    row_next[(j*ROW_BYTES+i)*8 +: 8] = 8'd0;
                end else if (out_pad) begin
                    row_next[(j*ROW_BYTES+i)*8 +: 8] = out_pad_value;
                end else if (src >= 0 && src < BUS_BYTES) begin
                    row_next[(j*ROW_BYTES+i)*8 +: 8] = mem_resp_data[src*8 +: 8];
                end else begin
                    row_next[(j*ROW_BYTES+i)*8 +: 8] =
                        out_first ? 8'd0 : row_buf[(j*ROW_BYTES+i)*8 +: 8];
                end
            end
        end
    end

    always @(posedge clk) begin
        if (out_valid) row_buf <= row_next;
        wr_en <= !rst && out_valid && out_last;
        wr_addr <= out_spad;
        wr_rows <= out_n;
        wr_data <= row_next;
    end

    reg in_flight;
    always @(*) begin
        in_flight = 1'b0;
        for (s = 0; s < LATENCY; s = s + 1) in_flight = in_flight | tag_line[s][TAG_W];
    end
    assign busy = issuing || in_flight || wr_en;
endmodule
