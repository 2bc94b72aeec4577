// ws_accel: the whole accelerator: command queues, DMA, scratchpad, array, epilogue.
//
// Software sends commands (cmd_valid/cmd_ready, one CMD_W-bit word each). A dispatcher
// puts them, in order, into three queues (Gemmini's load / execute / store split):
//
//   LOAD    (op 0) main memory -> scratchpad rows through ws_dma_load (strided or im2col)
//   COMPUTE (op 1) one array tile: ROWS weight rows at w_row (bottom row first), m_len
//                  activation rows from a_row in a 2-D pattern (a_count1 rows a_stride1
//                  apart per line, lines a_stride2 apart; a_count1 = 0: one line), so
//                  a convolution's windows are read from resident input rows; accumulator
//                  flags add / emit, its rows from acc_row on (several tiles' partial
//                  sums side by side)
//   STORE   (op 2) the next count1*count2 emitted result rows, through the epilogue,
//                  to main memory through ws_dma_store (strided)
//   CONFIG  (op 3) the epilogue's settings, bias and multiplier vectors (store queue);
//                  with bit 2, a chunk of the epilogue's lookup table instead, or with
//                  bits 2 and 5 its per-column scales
//
// The three units run concurrently and synchronise with three token counters (as VTA
// does), so software can double-buffer scratchpad regions and overlap load, compute
// and store. A command with `wait` (bit 3, bit 5) first takes a token, one with `signal`
// (bit 4) gives one when it is done:
//   LOAD     wait: a buffer was freed (exec -> load); bit 5: a residual buffer was read
//            (store -> load);  signal: after its last row is written; bit 6: the same
//            for the store unit (load -> store: rows a pooling STORE reads are there);
//            bit 7 (fence): every STORE sent before it has written its last beat to
//            main memory, so it reads what they wrote (a layer's input that the layer
//            before it stored: the next layer's commands can be queued, and its loads
//            without the fence run, while this one's results drain)
//   COMPUTE  wait: its operands are loaded (load -> exec, taken when its weights start);
//            signal: after its last activation row entered the array (its buffers are free)
//   STORE    wait: rows to pool are loaded (load -> store, taken when it starts);
//            signal: after its last row entered the epilogue (its scratchpad rows are read)
// On-chip rows (the next layer's input made in place, as Gemmini's accumulator ->
// scratchpad move-out): a STORE with bit 5 sends its rows, after the epilogue and the
// output FIFO, into the scratchpad instead of main memory (row i = i2*count1 + i1 to row
// base + i2*stride2 + i1*stride1, bytes from `length` on 0), written by the on-chip writer
// in cycles the load DMA does not write. Two 16-bit counters, the rows such STOREs promised
// when dispatched and the rows written, let a reader wait for exactly the rows it reads:
// a COMPUTE with bit 5 ([160+:16] ahead) starts its activation reads, a STORE with bit 2
// ([256+:16] ahead: its pooled or residual rows) is popped, once every promised row but the
// last `ahead` is written (its dispatch stamps the promised count in [176+:16] / [280+:16]).
// An on-chip STORE is not one the fence counts.
// Results need no token: the store unit admits emitted rows into the epilogue only for
// a STORE command, so the array simply waits (back-pressure) for one. The epilogue's
// int8 rows wait in an output FIFO (OUT_DEPTH rows) for ws_dma_store, so on a bus
// narrower than a row the array freezes only once that FIFO is full, not for every
// row's beats. A CONFIG waits until every earlier row has left the epilogue (the rows
// in the FIFO no longer need it). With a residual add configured,
// each row a STORE admits reads its residual row from the scratchpad (port 2), from the
// STORE's spad_row on; residual rows are loaded by an earlier LOAD of the same step, so
// the load -> exec -> store order already guarantees they are there.
// A pooling STORE (bit 6) takes its rows from the scratchpad instead of the array: row i
// is the bytewise signed max of `window` rows spad_row + i + t*window_stride (t < window),
// or with window_count1 > 0 of the 2-D pattern spad_row + i*pixel_step
// + (t / window_count1)*window_stride2 + (t % window_count1)*window_stride (a k x k window
// of input rows resident in the scratchpad, at the pool's stride),
// read one per cycle on port 2 and sent through the epilogue (configured as the identity)
// to memory: a max-pool over rows the DMA gathered with its im2col addressing. With bit 7
// (sum) the row is instead the int32 sum of the window's rows, which the epilogue scales
// as any accumulator row (bias, requantize, clip): an average pool.
//
// Command word (glensidec.hardware.commands.encode_command writes the same layout):
//   [1:0] op, [3] wait, [4] signal
//   LOAD/STORE: [8+:32] base, [40+:8] length, [48+:16] count1, [64+:32] stride1,
//               [96+:16] count2, [112+:32] stride2, [144+:24] spad_row, [168] bounds,
//               [176+:16] y0, [192+:16] y_step, [208+:16] height, [224+:16] x0,
//               [240+:16] x_step, [256+:16] width, [272+:8] pad_value
//               (STORE: spad_row is the first residual or pooled row; a pooling STORE
//               reads window from [176+:16] and window_stride from [192+:24], and its
//               window's lines and pixel step from [216+:8] window_count1 (taps per
//               line, 0: one line), [224+:24] window_stride2 (rows between lines) and
//               [248+:8] pixel_step (rows between pooled rows, 0: 1))
//   COMPUTE:    [8+:24] w_row, [32+:24] a_row, [56+:16] m_len (>= 1), [72] add, [73] emit,
//               [80+:16] a_count1, [96+:24] a_stride1, [120+:24] a_stride2: activation
//               row i = i2*a_count1 + i1 is a_row + i2*a_stride2 + i1*a_stride1 (rows
//               wrap modulo the scratchpad); a_count1 = 0 reads a_row + i*a_stride1;
//               [144+:16] acc_row: row i accumulates in accumulator row acc_row + i
//   (A fenced LOAD's queue entry keeps, in its unused bits [280+:16], the count of STOREs
//   sent before it, so CMD_W >= 296.)
//   The row fields are 24 bits: a scratchpad holds at most 2^24 rows (SPAD_W <= 24;
//   glensidec.hardware.commands.AccelConfig refuses more).
//   CONFIG:     [5] residual, [6] residual early, [7] lookup (map each result through the
//               table), [8+:6] pre, [16+:6] post, [24+:8] zero_point, [32+:8] low,
//               [40+:8] high, [48+:32*COLS] bias, [48+32*COLS+:32*COLS] multiplier, then
//               from R = 48+64*COLS: [R+:32] res_self, [R+32+:32] res_mult,
//               [R+64+:32] res_offset, [R+96+:32] res_multiplier, [R+128+:6] res_pre,
//               [R+134] res_product (the late residual's y · res_self is y · r instead:
//               an element-wise product of two int8 rows, a GELU's x · Φ(x)),
//               [R+135] res_rows (per row: the residual row's low 8 bytes are its output
//               row's offset and multiplier, little-endian i32, ws_epilogue's per-row mode),
//               [R+136+:6] res_post, [R+144+:8] res_zero_point, [R+152+:8] res_low,
//               [R+160+:8] res_high
//   CONFIG with [2] (a table chunk): [8+:8] chunk j, [48+8*i+:8] entry j*TCHUNK + i of the
//               256-entry lookup table, i < TCHUNK = min(256, 8*COLS) (where a CONFIG has
//               its vectors); timed as a CONFIG (it waits until the epilogue is empty)
//   CONFIG with [2] and [5] (scales): [48+8*c+:8] column c's signed scale, which multiplies
//               its biased sum before the requantize (a run-time channel scale: squeeze-
//               excite's); timed as a CONFIG. Every plain CONFIG resets the scales to 1.
//
// Main memory: a read port (one aligned BUS_BYTES request per cycle, data LATENCY cycles
// later) and a posted write port (one strobed beat per cycle), like AXI's channels.
// Weight reads use scratchpad port 0, activation reads port 1 and residual reads port 2;
// software keeps weights in other banks than activations and residual rows (a conflict
// with port 0 or 2 only delays the activation read a cycle). Timing is in
// docs/hardware.md; glensidec.hardware.commands.AccelModel predicts it to the cycle.
module ws_accel #(
    parameter integer ROWS        = 4,
    parameter integer COLS        = 4,
    parameter integer ACC_DEPTH   = 64,
    parameter integer ROW_BYTES   = 4,     // >= ROWS and >= COLS (int8 operands)
    parameter integer BANKS       = 4,
    parameter integer BANK_ROWS   = 64,
    parameter integer BUS_BYTES   = 4,
    parameter integer LATENCY     = 2,
    parameter integer QUEUE_DEPTH = 8,     // entries of each command queue (power of two)
    parameter integer OUT_DEPTH   = 16,    // int8 result rows waiting for the store DMA (2^n)
    parameter integer EPI_LANES   = COLS,  // the epilogue's lanes: a row takes COLS/EPI_LANES cycles
    parameter integer EPI_DEPTH   = 2,     // accumulator rows waiting for them (2^n, >= 2)
    parameter integer WRITE_ROWS  = 1,     // rows a DMA write may carry (ws_dma_load's groups)
    parameter integer W_LOAD      = 1,     // weight rows a cycle into the array (2^n, <= ROWS)
    parameter integer CMD_W       = (216 + 64 * COLS > 296) ? 216 + 64 * COLS : 296
) (
    input  wire                   clk,
    input  wire                   rst,            // synchronous, active high
    input  wire                   cmd_valid,
    output wire                   cmd_ready,
    input  wire [CMD_W-1:0]       cmd_data,
    output wire                   mem_rd_valid,
    output wire [31:0]            mem_rd_addr,
    input  wire [BUS_BYTES*8-1:0] mem_rd_data,
    output wire                   mem_wr_valid,
    output wire [31:0]            mem_wr_addr,
    output wire [BUS_BYTES*8-1:0] mem_wr_data,
    output wire [BUS_BYTES-1:0]   mem_wr_strb,
    output wire                   idle            // queues empty, every result stored
);
    localparam integer SPAD_W  = $clog2(BANKS * BANK_ROWS);
    localparam integer LEN_W   = $clog2(ROW_BYTES + 1);
    localparam integer WN_W    = $clog2(WRITE_ROWS + 1);
    localparam integer RW      = $clog2(ROWS);          // ROWS >= 2
    localparam integer TRACK   = 1 << $clog2(LATENCY + 3);  // loads in flight, never full
    localparam integer EXEC_W  = 192;   // COMPUTE's fields and its rows-wait stamp
    localparam integer AW      = $clog2(ACC_DEPTH);
    // {rows wait, rows needed, acc_row, stride2, stride1, count1, signal, emit, add, m_len,
    //  a_row}
    localparam integer AQ_W    = 140;
    localparam integer TOK_W   = 16;
    localparam [1:0] OP_LOAD = 2'd0, OP_COMPUTE = 2'd1, OP_STORE = 2'd2, OP_CONFIG = 2'd3;
    localparam integer STAMP = 280;                 // a fenced LOAD's count of earlier STOREs
    localparam integer C_STAMP = 176;               // a rows-waiting COMPUTE's promised rows

    // ---- dispatcher -------------------------------------------------------------------
    wire [1:0] cmd_op = cmd_data[1:0];
    wire lq_full, eq_full, sq_full;
    wire to_load = cmd_op == OP_LOAD, to_exec = cmd_op == OP_COMPUTE;
    wire to_store = !to_load && !to_exec;
    assign cmd_ready = to_load ? !lq_full : to_exec ? !eq_full : !sq_full;
    wire cmd_fire = cmd_valid && cmd_ready;

    // ---- rows made on chip ----------------------------------------------------------------
    // STOREs with bit 5 write their rows into the scratchpad (on-chip rows); oc_sent counts
    // the rows such STOREs promised when dispatched, oc_made the rows written so far (16-bit
    // counts). A COMPUTE with bit 5 or a STORE with bit 2 (rows wait) is stamped at dispatch
    // with oc_sent and carries `ahead`: it starts reading once oc_made has reached
    // stamp - ahead (modulo 2^16), i.e. once every promised row but the last `ahead` is in
    // the scratchpad: a layer starts on its input rows while the layer before makes them.
    reg  [15:0]      oc_sent, oc_made;
    wire             oc_write;                // the on-chip writer writes a row this cycle
    wire [15:0]      cmd_rows16 = cmd_data[48 +: 16] * cmd_data[96 +: 16];
    wire             cmd_onchip = cmd_op == OP_STORE && cmd_data[5];
    wire             cmd_dram_store = cmd_op == OP_STORE && !cmd_data[5];
    always @(posedge clk) begin
        if (rst) begin
            oc_sent <= 16'd0;
            oc_made <= 16'd0;
        end else begin
            if (cmd_fire && cmd_onchip) oc_sent <= oc_sent + cmd_rows16;
            if (oc_write) oc_made <= oc_made + 16'd1;
        end
    end
    // made >= need, modulo 2^16 (fewer than 2^15 rows are ever outstanding)
    function automatic rows_ready(input [15:0] need, input [15:0] made);
        reg [15:0] behind;
        begin
            behind = need - made;
            rows_ready = behind == 16'd0 || behind[15];
        end
    endfunction

    // ---- token counters -----------------------------------------------------------------
    reg  [TOK_W-1:0] tok_le, tok_el;   // load -> exec (operands ready), exec -> load (free)
    reg  [TOK_W-1:0] tok_sl;           // store -> load (residual rows read)
    reg  [TOK_W-1:0] tok_ls;           // load -> store (rows to pool loaded)
    wire le_give, le_take, el_give, el_take, sl_give, sl_take, ls_give, ls_take;
    always @(posedge clk) begin
        if (rst) begin
            tok_le <= {TOK_W{1'b0}};
            tok_el <= {TOK_W{1'b0}};
            tok_sl <= {TOK_W{1'b0}};
            tok_ls <= {TOK_W{1'b0}};
        end else begin
            tok_le <= tok_le + {{(TOK_W-1){1'b0}}, le_give} - {{(TOK_W-1){1'b0}}, le_take};
            tok_el <= tok_el + {{(TOK_W-1){1'b0}}, el_give} - {{(TOK_W-1){1'b0}}, el_take};
            tok_sl <= tok_sl + {{(TOK_W-1){1'b0}}, sl_give} - {{(TOK_W-1){1'b0}}, sl_take};
            tok_ls <= tok_ls + {{(TOK_W-1){1'b0}}, ls_give} - {{(TOK_W-1){1'b0}}, ls_take};
        end
    end

    // ---- load unit ------------------------------------------------------------------------
    /* verilator lint_off UNUSEDSIGNAL */  // queue entries hold whole command words
    wire [CMD_W-1:0] lq_head;
    /* verilator lint_on UNUSEDSIGNAL */
    wire             lq_empty, l_cmd_ready, track_empty, track_full;
    // the fence: STOREs sent (st_sent) and written (st_written), 16-bit counts; a fenced
    // LOAD waits until st_written has reached the st_sent of its dispatch (modulo 2^16:
    // fewer than 2^15 STOREs are ever outstanding, the queues are far shorter)
    reg  [15:0]      st_sent, st_written;
    wire             st_cmd_done;             // ws_dma_store wrote a STORE's last beat
    wire [15:0]      st_behind = lq_head[STAMP +: 16] - st_written;
    wire             fence_ok = !lq_head[7] || st_behind == 16'd0 || st_behind[15];
    wire             l_tok_ok = (!lq_head[3] || tok_el != {TOK_W{1'b0}})
                                && (!lq_head[5] || tok_sl != {TOK_W{1'b0}}) && fence_ok;
    wire [CMD_W-1:0] stamp_mask = {{(CMD_W-16){1'b0}}, 16'hFFFF} << STAMP;
    wire [CMD_W-1:0] stamped    = (cmd_data & ~stamp_mask)
                                  | ({{(CMD_W-16){1'b0}}, st_sent} << STAMP);
    always @(posedge clk) begin
        if (rst) begin
            st_sent    <= 16'd0;
            st_written <= 16'd0;
        end else begin
            if (cmd_fire && cmd_dram_store) st_sent <= st_sent + 16'd1;
            if (st_cmd_done) st_written <= st_written + 16'd1;
        end
    end
    wire             l_valid  = !lq_empty && l_tok_ok && !track_full;
    wire             l_accept = l_valid && l_cmd_ready;
    assign el_take = l_accept && lq_head[3];
    assign sl_take = l_accept && lq_head[5];

    ws_fifo #(.WIDTH(CMD_W), .DEPTH(QUEUE_DEPTH)) load_queue (
        .clk(clk), .rst(rst), .push(cmd_fire && to_load), .din(cmd_data[7] ? stamped : cmd_data),
        .pop(l_accept), .head(lq_head), .empty(lq_empty), .full(lq_full));

    wire                 spad_wr_en;
    wire [SPAD_W-1:0]    spad_wr_addr;
    wire [WN_W-1:0]      spad_wr_rows;          // rows the DMA writes at once
    wire [WRITE_ROWS*ROW_BYTES*8-1:0] spad_wr_data;
    wire                 l_busy;
    ws_dma_load #(.ROW_BYTES(ROW_BYTES), .BUS_BYTES(BUS_BYTES), .LATENCY(LATENCY),
                  .COUNT_W(16), .SPAD_W(SPAD_W), .WRITE_ROWS(WRITE_ROWS)) dma_load (
        .clk(clk), .rst(rst), .cmd_valid(l_valid), .cmd_ready(l_cmd_ready),
        .cmd_base(lq_head[8 +: 32]), .cmd_length(lq_head[40 +: LEN_W]),
        .cmd_count1(lq_head[48 +: 16]), .cmd_stride1(lq_head[64 +: 32]),
        .cmd_count2(lq_head[96 +: 16]), .cmd_stride2(lq_head[112 +: 32]),
        .cmd_spad_row(lq_head[144 +: SPAD_W]), .cmd_bounds(lq_head[168]),
        .cmd_y0(lq_head[176 +: 16]), .cmd_y_step(lq_head[192 +: 16]),
        .cmd_height(lq_head[208 +: 16]), .cmd_x0(lq_head[224 +: 16]),
        .cmd_x_step(lq_head[240 +: 16]), .cmd_width(lq_head[256 +: 16]),
        .cmd_pad_value(lq_head[272 +: 8]),
        .mem_req_valid(mem_rd_valid), .mem_req_addr(mem_rd_addr), .mem_resp_data(mem_rd_data),
        .wr_en(spad_wr_en), .wr_addr(spad_wr_addr), .wr_rows(spad_wr_rows),
        .wr_data(spad_wr_data), .busy(l_busy));

    // Loads in flight: {signal to store, signal, rows}; done when the last row is written.
    wire [33:0] track_head;
    reg  [31:0] track_written;
    wire [31:0] load_rows = lq_head[48 +: 16] * lq_head[96 +: 16];
    wire [31:0] wr_rows32 = {{(32-WN_W){1'b0}}, spad_wr_rows};
    wire        track_done = spad_wr_en && track_written + wr_rows32 == track_head[31:0];
    assign le_give = track_done && track_head[32];
    assign ls_give = track_done && track_head[33];
    ws_fifo #(.WIDTH(34), .DEPTH(TRACK)) load_track (
        .clk(clk), .rst(rst), .push(l_accept), .din({lq_head[6], lq_head[4], load_rows}),
        .pop(track_done), .head(track_head), .empty(track_empty), .full(track_full));
    always @(posedge clk) begin
        if (rst || track_done) track_written <= 32'd0;
        else if (spad_wr_en)   track_written <= track_written + wr_rows32;
    end

    // ---- execute unit: weight streamer (port 0) ---------------------------------------------
    /* verilator lint_off UNUSEDSIGNAL */  // queue entries hold whole command words
    wire [EXEC_W-1:0] eq_head;
    /* verilator lint_on UNUSEDSIGNAL */
    wire              eq_empty, aq_full, aq_empty;
    wire              arr_w_ready, arr_a_ready;
    reg               w_active, w_q;        // w_q: rd0_data holds an untaken weight beat
    reg  [SPAD_W-1:0] w_base;
    reg  [RW-1:0]     w_beat;
    // a tile's weights: ROWS / W_LOAD beats of W_LOAD rows (ws_spad's port 0 reads them)
    localparam integer  LAST_BEAT_I = ROWS / W_LOAD - 1;
    localparam [RW-1:0] LAST_BEAT = LAST_BEAT_I[RW-1:0];
    localparam integer  LOAD_SHIFT  = $clog2(W_LOAD);
    wire w_consume    = w_q && arr_w_ready;
    wire w_issue      = w_active && (!w_q || w_consume);
    wire w_issue_last = w_issue && w_beat == LAST_BEAT;
    wire e_tok_ok     = !eq_head[3] || tok_le != {TOK_W{1'b0}};
    wire w_start      = (!w_active || w_issue_last) && !eq_empty && e_tok_ok && !aq_full;
    assign le_take = w_start && eq_head[3];

    ws_fifo #(.WIDTH(EXEC_W), .DEPTH(QUEUE_DEPTH)) exec_queue (
        .clk(clk), .rst(rst), .push(cmd_fire && to_exec),
        .din(cmd_data[5] ? {oc_sent, cmd_data[C_STAMP-1:0]} : cmd_data[EXEC_W-1:0]),
        .pop(w_start), .head(eq_head), .empty(eq_empty), .full(eq_full));

    always @(posedge clk) begin
        if (rst) begin
            w_active <= 1'b0;
            w_q      <= 1'b0;
        end else begin
            w_q <= w_issue || (w_q && !w_consume);
            if (w_start) begin
                w_active <= 1'b1;
                w_base   <= eq_head[8 +: SPAD_W];
                w_beat   <= {RW{1'b0}};
            end else if (w_issue_last) begin
                w_active <= 1'b0;
            end else if (w_issue) begin
                w_beat <= w_beat + 1'b1;
            end
        end
    end

    // ---- execute unit: activation streamer (port 1) -----------------------------------------
    // The weight streamer hands each tile it starts to the activation streamer.
    /* verilator lint_off UNUSEDSIGNAL */  // queue entries hold whole command words
    wire [AQ_W-1:0] aq_head;
    /* verilator lint_on UNUSEDSIGNAL */
    wire            a_start;
    ws_fifo #(.WIDTH(AQ_W), .DEPTH(4)) act_queue (
        .clk(clk), .rst(rst), .push(w_start),
        .din({eq_head[5], eq_head[C_STAMP +: 16] - eq_head[160 +: 16],
              eq_head[144 +: 16], eq_head[120 +: 24], eq_head[96 +: 24], eq_head[80 +: 16],
              eq_head[4],
              eq_head[73], eq_head[72], eq_head[56 +: 16], eq_head[32 +: 24]}),
        .pop(a_start), .head(aq_head), .empty(aq_empty), .full(aq_full));

    reg               a_active, a_add, a_emit, a_signal;
    reg  [SPAD_W-1:0] a_addr;
    reg  [SPAD_W-1:0] a_line;               // the first row of the current line
    reg  [SPAD_W-1:0] a_stride1, a_stride2; // the tile's 2-D read pattern
    reg  [15:0]       a_count1, a_col;      // rows per line (0: one line), row in line
    reg  [15:0]       a_left;               // rows of the tile still to read
    reg  [AW-1:0]     a_acc, q_acc;         // the tile's first accumulator row
    wire a_wrap = a_count1 != 16'd0 && a_col + 16'd1 == a_count1;
    reg               q_valid, q_last, q_add, q_emit, q_signal;   // the row in rd1_data
    wire              rd1_grant;
    wire a_consume    = q_valid && arr_a_ready;
    wire a_try        = a_active && (!q_valid || a_consume);
    wire a_issued     = a_try && rd1_grant;
    wire a_issue_last = a_issued && a_left == 16'd1;
    wire a_rows_ok    = !aq_head[139] || rows_ready(aq_head[123 +: 16], oc_made);
    assign a_start    = (!a_active || a_issue_last) && !aq_empty && a_rows_ok;
    assign el_give = a_consume && q_last && q_signal;

    always @(posedge clk) begin
        if (rst) begin
            a_active <= 1'b0;
            q_valid  <= 1'b0;
        end else begin
            if (a_start) begin
                {a_signal, a_emit, a_add} <= aq_head[42:40];
                a_left    <= aq_head[24 +: 16];
                a_addr    <= aq_head[0 +: SPAD_W];
                a_line    <= aq_head[0 +: SPAD_W];
                a_count1  <= aq_head[43 +: 16];
                a_stride1 <= aq_head[59 +: SPAD_W];
                a_stride2 <= aq_head[83 +: SPAD_W];
                a_acc     <= aq_head[107 +: AW];
                a_col     <= 16'd0;
                a_active  <= 1'b1;
            end else if (a_issue_last) begin
                a_active <= 1'b0;
            end else if (a_issued) begin
                a_left <= a_left - 1'b1;
                if (a_wrap) begin             // next line
                    a_addr <= a_line + a_stride2;
                    a_line <= a_line + a_stride2;
                    a_col  <= 16'd0;
                end else begin
                    a_addr <= a_addr + a_stride1;
                    a_col  <= a_col + 16'd1;
                end
            end
            if (a_issued) begin
                {q_valid, q_last, q_add, q_emit} <= {1'b1, a_left == 16'd1, a_add, a_emit};
                q_signal <= a_signal && a_left == 16'd1;
                q_acc    <= a_acc;
            end else if (a_consume) begin
                q_valid <= 1'b0;
            end
        end
    end

    // ---- scratchpad and array ---------------------------------------------------------------
    /* verilator lint_off UNUSEDSIGNAL */  // rows wider than the array's operands
    wire [W_LOAD*ROW_BYTES*8-1:0] rd0_data;     // a weight beat: W_LOAD rows
    wire [ROW_BYTES*8-1:0] rd1_data, rd2_data;
    /* verilator lint_on UNUSEDSIGNAL */
    wire                   res_read;                    // a residual row read (port 2)
    wire                   spad_w_en;                   // the DMA's or the on-chip writer's
    wire [SPAD_W-1:0]      spad_w_addr;
    wire [WN_W-1:0]        spad_w_rows;
    wire [WRITE_ROWS*ROW_BYTES*8-1:0] spad_w_data;
    reg  [SPAD_W-1:0]      res_addr;
    ws_spad #(.ROW_BYTES(ROW_BYTES), .BANKS(BANKS), .BANK_ROWS(BANK_ROWS),
              .WRITE_ROWS(WRITE_ROWS), .W_LOAD(W_LOAD)) spad (
        .clk(clk), .wr_en(spad_w_en), .wr_addr(spad_w_addr), .wr_rows(spad_w_rows),
        .wr_data(spad_w_data),
        .wr_mask({ROW_BYTES{1'b1}}),
        .rd0_en(w_issue), .rd0_addr(w_base + ({{(SPAD_W-RW){1'b0}}, w_beat} << LOAD_SHIFT)),
        .rd0_data(rd0_data),
        .rd1_en(a_try), .rd1_addr(a_addr), .rd1_grant(rd1_grant), .rd1_data(rd1_data),
        .rd2_en(res_read || pool_issue), .rd2_addr(pool_issue ? p_addr : res_addr),
        .rd2_data(rd2_data));

    wire             r_valid, r_ready;
    wire [COLS*32-1:0] r_data;
    /* verilator lint_off UNUSEDSIGNAL */  // no D stream: bias is added in the epilogue
    wire             d_ready;
    /* verilator lint_on UNUSEDSIGNAL */
    // each of a beat's rows: its first COLS bytes (the scratchpad row is ROW_BYTES wide)
    wire [W_LOAD*COLS*8-1:0] w_beat_data;
    genvar wk;
    generate
        for (wk = 0; wk < W_LOAD; wk = wk + 1) begin : g_w_beat
            assign w_beat_data[wk*COLS*8 +: COLS*8] = rd0_data[wk*ROW_BYTES*8 +: COLS*8];
        end
    endgenerate
    ws_top #(.ROWS(ROWS), .COLS(COLS), .IN_W(8), .ACC_W(32), .ACC_DEPTH(ACC_DEPTH),
             .W_LOAD(W_LOAD)) array (
        .clk(clk), .rst(rst),
        .w_valid(w_q), .w_ready(arr_w_ready), .w_data(w_beat_data),
        .a_valid(q_valid), .a_ready(arr_a_ready), .a_data(rd1_data[ROWS*8-1:0]),
        .a_last(q_last), .a_add(q_add), .a_emit(q_emit), .a_use_d(1'b0), .a_acc_row(q_acc),
        .d_valid(1'b0), .d_ready(d_ready), .d_data({COLS*32{1'b0}}),
        .r_valid(r_valid), .r_ready(r_ready), .r_data(r_data));

    // ---- store unit ---------------------------------------------------------------------------
    /* verilator lint_off UNUSEDSIGNAL */  // CONFIG words end before CMD_W
    wire [CMD_W-1:0] sq_head;
    /* verilator lint_on UNUSEDSIGNAL */
    wire             sq_empty, s_cmd_ready, epi_in_ready, epi_out_valid, st_in_ready, st_busy;
    wire             out_empty, out_full;   // the output FIFO (epilogue -> ws_dma_store)
    reg              s_pending;             // a STORE waits for ws_dma_store to accept it
    /* verilator lint_off UNUSEDSIGNAL */  // queue entries hold whole command words
    reg  [143:0]     s_cmd;                 // its fields [8..144) of the command word
    /* verilator lint_on UNUSEDSIGNAL */
    reg              s_signal;              // the admitting STORE gives a store -> load token
    reg              s_onchip;              // the pending STORE writes the scratchpad
    reg  [31:0]      s_left;                // its rows not yet admitted to the epilogue
    reg  [31:0]      epi_rows;              // rows inside the epilogue (its FIFO included)
    // pooling: the admitting STORE's reads (p_*) and the row read last cycle (q2_*)
    reg              s_pool, q2_valid, q2_first, q2_last;
    reg  [15:0]      p_window, p_t;
    reg  [SPAD_W-1:0] p_wstride;
    reg  [SPAD_W-1:0] p_pix, p_addr;
    reg  [7:0]       p_wcount1, p_tx, p_step;  // taps per window line (0: one line), pixel step
    reg  [SPAD_W-1:0] p_wstride2, p_line;    // rows between window lines, this line's first
    /* verilator lint_off UNUSEDSIGNAL */
    wire [31:0]      p_step_wide = {24'd0, p_step};
    /* verilator lint_on UNUSEDSIGNAL */
    wire [SPAD_W-1:0] p_step_rows = p_step_wide[SPAD_W-1:0];
    reg  [31:0]      p_reads;               // reads of the pooling STORE not yet issued
    reg              s_sum;                 // the pooling STORE sums (else takes the max)
    reg  [COLS*32-1:0] p_kept;              // max or sum of the pooled row's earlier rows
    wire q2_consume   = q2_valid && (!q2_last || epi_in_ready);
    wire pool_issue   = s_pool && p_reads != 32'd0 && (!q2_valid || q2_consume);
    wire pool_admit   = q2_valid && q2_last && epi_in_ready;
    wire acc_admit    = r_valid && epi_in_ready && s_left != 32'd0 && !s_pool;
    wire admit        = acc_admit || pool_admit;
    wire admit_last   = admit && s_left == 32'd1;
    // the pending STORE goes to ws_dma_store or (bit 5) to the on-chip writer, once both
    // have taken their last rows from the output FIFO (its rows come after theirs)
    wire oc_free;
    wire s_accept     = s_pending && s_cmd_ready && oc_free;
    wire head_config  = sq_head[1:0] == OP_CONFIG;
    // a STORE with bit 2 reads on-chip rows (pooled or residual): it waits for them
    wire s_rows_ok    = !sq_head[2] || rows_ready(sq_head[STAMP +: 16] - sq_head[256 +: 16],
                                                  oc_made);
    wire store_pop    = !sq_empty && !head_config && (s_left == 32'd0 || admit_last)
                        && (!s_pending || s_accept) && (!sq_head[3] || tok_ls != {TOK_W{1'b0}})
                        && s_rows_ok;
    // a CONFIG waits until every earlier row has left the epilogue (rows in the output
    // FIFO are int8 already: the store DMA writes them while the next block computes)
    wire config_pop   = !sq_empty && head_config && s_left == 32'd0 && epi_rows == 32'd0;
    wire epi_out_fire = epi_out_valid && !out_full;   // a row into the output FIFO
    wire out_pop      = (!out_empty && st_in_ready) || oc_write;  // the oldest row leaves
    assign r_ready = epi_in_ready && s_left != 32'd0 && !s_pool;
    assign sl_give = admit_last && s_signal;
    assign ls_take = store_pop && sq_head[3];

    // the pooled row, as the epilogue's int32 inputs: per column the signed max (or the
    // sum) of p_kept and the byte of the row read last cycle
    wire [COLS*32-1:0] pooled_wide;
    genvar pc;
    generate
        for (pc = 0; pc < COLS; pc = pc + 1) begin : g_pool
            wire signed [7:0]  read_byte = rd2_data[pc*8 +: 8];
            wire signed [31:0] read_wide = {{24{read_byte[7]}}, read_byte};
            wire signed [31:0] kept      = p_kept[pc*32 +: 32];
            assign pooled_wide[pc*32 +: 32] =
                q2_first ? read_wide : s_sum ? kept + read_wide
                : read_wide > kept ? read_wide : kept;
        end
    endgenerate
    always @(posedge clk) begin
        if (rst) begin
            s_pool   <= 1'b0;
            p_reads  <= 32'd0;
            q2_valid <= 1'b0;
        end else begin
            if (store_pop) begin
                s_pool    <= sq_head[6];
                s_sum     <= sq_head[7];
                p_window  <= sq_head[176 +: 16];
                p_wstride <= sq_head[192 +: SPAD_W];
                p_pix     <= sq_head[144 +: SPAD_W];
                p_addr    <= sq_head[144 +: SPAD_W];
                p_line    <= sq_head[144 +: SPAD_W];
                p_t       <= 16'd0;
                p_tx      <= 8'd0;
                p_wcount1 <= sq_head[216 +: 8];
                p_wstride2 <= sq_head[224 +: SPAD_W];
                p_step    <= sq_head[248 +: 8] == 8'd0 ? 8'd1 : sq_head[248 +: 8];
                p_reads   <= sq_head[6] ? sq_head[48 +: 16] * sq_head[96 +: 16] * sq_head[176 +: 16]
                                        : 32'd0;
            end else if (pool_issue) begin
                p_reads <= p_reads - 32'd1;
                if (p_t == p_window - 16'd1) begin          // the next pooled row
                    p_t    <= 16'd0;
                    p_tx   <= 8'd0;
                    p_pix  <= p_pix + p_step_rows;
                    p_addr <= p_pix + p_step_rows;
                    p_line <= p_pix + p_step_rows;
                end else if (p_wcount1 != 8'd0 && p_tx == p_wcount1 - 8'd1) begin
                    p_t    <= p_t + 16'd1;                  // the window's next line
                    p_tx   <= 8'd0;
                    p_line <= p_line + p_wstride2;
                    p_addr <= p_line + p_wstride2;
                end else begin
                    p_t    <= p_t + 16'd1;
                    p_tx   <= p_tx + 8'd1;
                    p_addr <= p_addr + p_wstride;
                end
            end
            if (pool_issue) begin
                q2_valid <= 1'b1;
                q2_first <= p_t == 16'd0;
                q2_last  <= p_t == p_window - 16'd1;
            end else if (q2_consume) begin
                q2_valid <= 1'b0;
            end
            if (q2_consume) p_kept <= pooled_wide;
        end
    end

    ws_fifo #(.WIDTH(CMD_W), .DEPTH(QUEUE_DEPTH)) store_queue (
        .clk(clk), .rst(rst), .push(cmd_fire && to_store),
        .din(cmd_op == OP_STORE && cmd_data[2]
             ? (cmd_data & ~stamp_mask) | ({{(CMD_W-16){1'b0}}, oc_sent} << STAMP) : cmd_data),
        .pop(store_pop || config_pop), .head(sq_head), .empty(sq_empty), .full(sq_full));

    localparam integer RES = 48 + 64 * COLS;    // the residual fields of CONFIG
    localparam integer TCHUNK = (8 * COLS < 256) ? 8 * COLS : 256;  // table entries a chunk
    wire              vector = sq_head[2];          // a table chunk or the scales
    wire              table_chunk = vector && !sq_head[5];
    wire              scales = vector && sq_head[5];
    reg [COLS*8-1:0]  cfg_scale;
    reg [256*8-1:0]   cfg_table;
    reg               cfg_lookup;
    genvar te;
    generate
        for (te = 0; te < 256; te = te + 1) begin : g_table
            localparam integer CHUNK_I = te / TCHUNK;
            localparam [7:0]   CHUNK = CHUNK_I[7:0];
            always @(posedge clk)
                if (config_pop && table_chunk && sq_head[8 +: 8] == CHUNK)
                    cfg_table[te*8 +: 8] <= sq_head[48 + (te % TCHUNK)*8 +: 8];
        end
    endgenerate
    reg [5:0]         cfg_pre, cfg_post, cfg_res_pre, cfg_res_post;
    reg [7:0]         cfg_zero_point, cfg_low, cfg_high;
    reg [7:0]         cfg_res_zero_point, cfg_res_low, cfg_res_high;
    reg [COLS*32-1:0] cfg_bias, cfg_mult;
    reg               cfg_residual, cfg_res_early, cfg_res_product, cfg_res_rows;
    reg [31:0]        cfg_res_self, cfg_res_mult, cfg_res_offset, cfg_res_multiplier;
    assign res_read = acc_admit && cfg_residual;
    always @(posedge clk) begin
        if (rst) begin
            cfg_residual  <= 1'b0;
            cfg_res_early <= 1'b0;
            cfg_lookup    <= 1'b0;
        end else if (config_pop && !vector) begin
            cfg_residual  <= sq_head[5];
            cfg_res_early <= sq_head[6];
            cfg_lookup    <= sq_head[7];
        end
        if (rst || (config_pop && !vector)) cfg_scale <= {COLS{8'd1}};
        else if (config_pop && scales)     cfg_scale <= sq_head[48 +: COLS*8];
    end
    always @(posedge clk) begin
        if (rst) begin
            s_pending <= 1'b0;
            s_left    <= 32'd0;
            epi_rows  <= 32'd0;
        end else begin
            epi_rows <= epi_rows + {31'd0, admit} - {31'd0, epi_out_fire};
            if (store_pop) begin
                s_pending <= 1'b1;
                s_cmd     <= sq_head[143:0];
                s_left    <= sq_head[48 +: 16] * sq_head[96 +: 16];
                s_signal  <= sq_head[4];
                s_onchip  <= sq_head[5];
                res_addr  <= sq_head[144 +: SPAD_W];
            end else begin
                if (s_accept) s_pending <= 1'b0;
                if (admit)    s_left <= s_left - 32'd1;
                if (res_read) res_addr <= res_addr + 1'b1;
            end
        end
        if (config_pop && !vector) begin
            cfg_pre        <= sq_head[8 +: 6];
            cfg_post       <= sq_head[16 +: 6];
            cfg_zero_point <= sq_head[24 +: 8];
            cfg_low        <= sq_head[32 +: 8];
            cfg_high       <= sq_head[40 +: 8];
            cfg_bias       <= sq_head[48 +: COLS*32];
            cfg_mult       <= sq_head[48 + COLS*32 +: COLS*32];
            cfg_res_self   <= sq_head[RES +: 32];
            cfg_res_mult   <= sq_head[RES + 32 +: 32];
            cfg_res_offset <= sq_head[RES + 64 +: 32];
            cfg_res_multiplier <= sq_head[RES + 96 +: 32];
            cfg_res_pre    <= sq_head[RES + 128 +: 6];
            cfg_res_product <= sq_head[RES + 134];
            cfg_res_rows   <= sq_head[RES + 135];
            cfg_res_post   <= sq_head[RES + 136 +: 6];
            cfg_res_zero_point <= sq_head[RES + 144 +: 8];
            cfg_res_low    <= sq_head[RES + 152 +: 8];
            cfg_res_high   <= sq_head[RES + 160 +: 8];
        end
    end

    wire [COLS*8-1:0] epi_out_data;
    ws_epilogue #(.COLS(COLS), .OUT_W(8), .LANES(EPI_LANES), .DEPTH(EPI_DEPTH)) epilogue (
        .clk(clk), .rst(rst),
        .cfg_pre(cfg_pre), .cfg_post(cfg_post), .cfg_zero_point(cfg_zero_point),
        .cfg_low(cfg_low), .cfg_high(cfg_high), .cfg_lookup(cfg_lookup), .cfg_table(cfg_table),
        .cfg_residual(cfg_residual), .cfg_res_early(cfg_res_early),
        .cfg_res_product(cfg_res_product), .cfg_res_rows(cfg_res_rows),
        .cfg_res_self(cfg_res_self), .cfg_res_mult(cfg_res_mult),
        .cfg_res_offset(cfg_res_offset), .cfg_res_multiplier(cfg_res_multiplier),
        .cfg_res_pre(cfg_res_pre), .cfg_res_post(cfg_res_post),
        .cfg_res_zero_point(cfg_res_zero_point), .cfg_res_low(cfg_res_low),
        .cfg_res_high(cfg_res_high), .res_data(rd2_data[COLS*8-1:0]),
        .in_valid(s_pool ? q2_valid && q2_last : r_valid && s_left != 32'd0),
        .in_ready(epi_in_ready), .in_data(s_pool ? pooled_wide : r_data),
        .in_bias(cfg_bias), .in_mult(cfg_mult), .in_scale(cfg_scale),
        .out_valid(epi_out_valid), .out_ready(!out_full), .out_data(epi_out_data));

    wire [COLS*8-1:0] out_head;
    ws_fifo #(.WIDTH(COLS*8), .DEPTH(OUT_DEPTH)) out_fifo (
        .clk(clk), .rst(rst), .push(epi_out_fire), .din(epi_out_data),
        .pop(out_pop), .head(out_head), .empty(out_empty), .full(out_full));

    wire [ROW_BYTES*8-1:0] st_row;
    generate
        if (ROW_BYTES > COLS) begin : g_pad_row
            assign st_row = {{(ROW_BYTES-COLS)*8{1'b0}}, out_head};
        end else begin : g_full_row
            assign st_row = out_head;
        end
    endgenerate
    ws_dma_store #(.ROW_BYTES(ROW_BYTES), .BUS_BYTES(BUS_BYTES), .COUNT_W(16)) dma_store (
        .clk(clk), .rst(rst), .cmd_valid(s_pending && !s_onchip && oc_free),
        .cmd_ready(s_cmd_ready),
        .cmd_base(s_cmd[8 +: 32]), .cmd_length(s_cmd[40 +: LEN_W]),
        .cmd_count1(s_cmd[48 +: 16]), .cmd_stride1(s_cmd[64 +: 32]),
        .cmd_count2(s_cmd[96 +: 16]), .cmd_stride2(s_cmd[112 +: 32]),
        .in_valid(!out_empty), .in_ready(st_in_ready), .in_data(st_row),
        .mem_wr_valid(mem_wr_valid), .mem_wr_addr(mem_wr_addr), .mem_wr_data(mem_wr_data),
        .mem_wr_strb(mem_wr_strb), .busy(st_busy), .cmd_done(st_cmd_done));

    // ---- on-chip writer: an on-chip STORE's rows from the output FIFO into the scratchpad ----
    // Row i = i2*count1 + i1 goes to scratchpad row base + i2*stride2 + i1*stride1 (the next
    // layer's input layout; rows wrap), its bytes from `length` on 0 (as a LOAD writes
    // them). It shares the scratchpad's write port with ws_dma_load, which goes first.
    reg               oc_active;
    reg  [31:0]       oc_left;
    reg  [15:0]       oc_count1, oc_col;
    reg  [SPAD_W-1:0] oc_addr, oc_line, oc_stride1, oc_stride2;
    reg  [LEN_W-1:0]  oc_length;
    assign oc_write = oc_active && !out_empty && !spad_wr_en;
    assign oc_free  = !oc_active || (oc_write && oc_left == 32'd1);
    wire   oc_start = s_accept && s_onchip;
    always @(posedge clk) begin
        if (rst) begin
            oc_active <= 1'b0;
        end else if (oc_start) begin
            oc_active  <= 1'b1;
            oc_left    <= s_cmd[48 +: 16] * s_cmd[96 +: 16];
            oc_count1  <= s_cmd[48 +: 16];
            oc_col     <= 16'd0;
            oc_addr    <= s_cmd[8 +: SPAD_W];
            oc_line    <= s_cmd[8 +: SPAD_W];
            oc_stride1 <= s_cmd[64 +: SPAD_W];
            oc_stride2 <= s_cmd[112 +: SPAD_W];
            oc_length  <= s_cmd[40 +: LEN_W];
        end else if (oc_write) begin
            oc_left <= oc_left - 32'd1;
            if (oc_left == 32'd1) oc_active <= 1'b0;
            if (oc_col + 16'd1 == oc_count1) begin     // the next line
                oc_col  <= 16'd0;
                oc_line <= oc_line + oc_stride2;
                oc_addr <= oc_line + oc_stride2;
            end else begin
                oc_col  <= oc_col + 16'd1;
                oc_addr <= oc_addr + oc_stride1;
            end
        end
    end
    wire [ROW_BYTES*8-1:0] oc_row;
    genvar ob;
    generate
        for (ob = 0; ob < ROW_BYTES; ob = ob + 1) begin : g_oc_row
            localparam integer OB_I = ob;
            localparam [LEN_W-1:0] OB = OB_I[LEN_W-1:0];
            assign oc_row[ob*8 +: 8] = OB < oc_length ? st_row[ob*8 +: 8] : 8'd0;
        end
    endgenerate
    assign spad_w_en   = spad_wr_en || oc_write;
    assign spad_w_addr = spad_wr_en ? spad_wr_addr : oc_addr;
    assign spad_w_rows = spad_wr_en ? spad_wr_rows : {{(WN_W-1){1'b0}}, 1'b1};
    generate
        if (WRITE_ROWS == 1) begin : g_w_one
            assign spad_w_data = spad_wr_en ? spad_wr_data : oc_row;
        end else begin : g_w_rows   // the on-chip writer's row is the first
            assign spad_w_data = spad_wr_en ? spad_wr_data
                : {{((WRITE_ROWS-1)*ROW_BYTES*8){1'b0}}, oc_row};
        end
    endgenerate

    // ---- idle: every command done and every emitted row stored -------------------------------
    reg [31:0] emit_rows;   // emitting rows inside the array, not yet admitted
    always @(posedge clk) begin
        if (rst) emit_rows <= 32'd0;
        else emit_rows <= emit_rows + {31'd0, a_consume && q_emit} - {31'd0, acc_admit};
    end
    assign idle = lq_empty && track_empty && !l_busy && eq_empty && !w_active && !w_q
                  && aq_empty && !a_active && !q_valid && emit_rows == 32'd0
                  && sq_empty && !s_pending && s_left == 32'd0 && epi_rows == 32'd0 && !st_busy
                  && out_empty && !oc_active
                  && !q2_valid && p_reads == 32'd0;
endmodule
