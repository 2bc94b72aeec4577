`timescale 1ns/1ps
// tb_ws_accel_mem: simulation-only top that runs whole accelerator layers on ws_accel with
// main memory and the command stream inside the simulation, so nothing crosses into
// Python (or any other software) per cycle. Used by `make sim` for programs compiled with
// --accel (glensidec.cosim.accel_sim) under cocotb, and as the raw Verilator harness
// (`verilator --binary`, no cocotb) the co-simulation's speed is measured against.
//
// The memory model is the one glensidec.hardware.commands.AccelModel assumes (and
// glensidec.cosim.accel_driver played in Python before): one aligned BUS_BYTES read
// request per cycle answered exactly LATENCY cycles later (the bytes as they were when
// asked; 0 on the data lines in cycles with no answer due), and a posted write port
// applying one byte-strobed beat per cycle. Command words are offered back to back from
// the first cycle after reset, one per cycle while ws_accel takes them. The words are
// opaque here: a new command needs no change in this file.
//
// A run is a list of layers (plusargs):
//   +glensidec_dir=DIR    DIR/layer_N.mem.hex: main memory before layer N, one BUS_BYTES
//                         word per line; DIR/layer_N.cmd.hex: its command words
//   +glensidec_list=FILE  one line per layer to run, in order:
//                         N n_cmds mem_words out_first_word out_last_word wr_lo wr_hi
//                         (wr_lo..wr_hi-1: the bytes the layer may write)
//   +glensidec_out=DIR    DIR/layer_N.out.hex: the memory words out_first..out_last after
//                         the layer; DIR/results.txt: one line per layer,
//                         "N cycles errors first_error_address first_error_kind"
//                         (kind 1: a misaligned or out-of-range read, 2: write, 3: a
//                         write outside wr_lo..wr_hi, 4: the cycle limit)
//   +glensidec_finish     $finish after the last layer (the raw harness; under cocotb the
//                         test ends the simulation)
// Each layer starts with two cycles of reset. Its cycles are counted as the model counts
// them: the cycle of its last memory write + 1, once every command was taken and ws_accel
// is idle. `layers_done` counts finished layers, `done` rises after the last one.
module tb_ws_accel_mem #(
    parameter integer ROWS        = 4,
    parameter integer COLS        = 4,
    parameter integer ACC_DEPTH   = 64,
    parameter integer ROW_BYTES   = 4,
    parameter integer BANKS       = 4,
    parameter integer BANK_ROWS   = 64,
    parameter integer BUS_BYTES   = 4,
    parameter integer LATENCY     = 2,     // >= 1
    parameter integer QUEUE_DEPTH = 8,
    parameter integer OUT_DEPTH   = 16,
    parameter integer EPI_LANES   = COLS,
    parameter integer EPI_DEPTH   = 2,
    parameter integer WRITE_ROWS  = 1,
    parameter integer W_LOAD      = 1,     // weight rows a cycle into the array
    parameter integer MEM_WORDS   = 65536, // main memory, BUS_BYTES words
    parameter integer CMD_DEPTH   = 65536, // command words of one layer
    parameter integer CYCLE_LIMIT = 50000000,
    // Room for a command word, at least ws_accel's CMD_W: this file does not repeat
    // ws_accel's layout; the words are cut to its port (glensidec.cosim.accel_sim passes
    // its own bound and refuses a word that does not fit).
    parameter integer CMD_MAX     = 512 + 64 * COLS
) ();
    localparam integer BUS_W   = BUS_BYTES * 8;
    localparam integer BUS_LOG = $clog2(BUS_BYTES);
    localparam integer MEM_AW  = $clog2(MEM_WORDS);

    reg clk /*verilator public_flat_rd*/;
    initial clk = 1'b0;
    always #5 clk = ~clk;

    reg        done        /*verilator public_flat_rd*/ = 1'b0;
    reg [31:0] layers_done /*verilator public_flat_rd*/ = 32'd0;

    reg [BUS_W-1:0] mem  [0:MEM_WORDS-1];
    reg [CMD_MAX-1:0] cmds [0:CMD_DEPTH-1];

    // ---- the layer being run (set between layers by the sequencer below) -------------------
    reg        rst = 1'b1;            // the sequencer's; the rest is this block's
    reg        running;               // from reset until the layer finished
    reg        finished;              // every command taken and ws_accel idle
    reg [31:0] n_cmds, mem_words, wr_lo, wr_hi;
    reg [31:0] cmd_index, cycle, last_write, errors, error_address, error_kind;

    wire                 cmd_ready, mem_rd_valid, mem_wr_valid, idle;
    wire [31:0]          mem_rd_addr, mem_wr_addr;
    wire [BUS_W-1:0]     mem_wr_data;
    wire [BUS_BYTES-1:0] mem_wr_strb;
    reg  [BUS_W-1:0]     rd_line [0:LATENCY-1];   // answers in flight, oldest last
    wire                 cmd_valid = running && !rst && cmd_index < n_cmds;

    /* verilator lint_off WIDTHTRUNC */  // cmd_data: the word cut to ws_accel's CMD_W
    ws_accel #(.ROWS(ROWS), .COLS(COLS), .ACC_DEPTH(ACC_DEPTH), .ROW_BYTES(ROW_BYTES),
               .BANKS(BANKS), .BANK_ROWS(BANK_ROWS), .BUS_BYTES(BUS_BYTES),
               .LATENCY(LATENCY), .QUEUE_DEPTH(QUEUE_DEPTH), .OUT_DEPTH(OUT_DEPTH),
               .EPI_LANES(EPI_LANES), .EPI_DEPTH(EPI_DEPTH), .WRITE_ROWS(WRITE_ROWS),
               .W_LOAD(W_LOAD)) accel (
        .clk(clk), .rst(rst), .cmd_valid(cmd_valid), .cmd_ready(cmd_ready),
        .cmd_data(cmds[cmd_index[$clog2(CMD_DEPTH)-1:0]]),
        .mem_rd_valid(mem_rd_valid), .mem_rd_addr(mem_rd_addr),
        .mem_rd_data(rd_line[LATENCY-1]),
        .mem_wr_valid(mem_wr_valid), .mem_wr_addr(mem_wr_addr), .mem_wr_data(mem_wr_data),
        .mem_wr_strb(mem_wr_strb), .idle(idle));
    /* verilator lint_on WIDTHTRUNC */

    // an access of a whole bus word inside the layer's memory
    function automatic in_range(input [31:0] address);
        in_range = address[BUS_LOG-1:0] == 0 && {32'd0, address} + 64'(BUS_BYTES)
                   <= {32'd0, mem_words} * 64'(BUS_BYTES);
    endfunction

    task automatic flag(input [31:0] address, input [31:0] kind);
        if (errors == 32'd0) begin
            error_address <= address;
            error_kind    <= kind;
        end
        errors <= errors + 32'd1;
    endtask

    wire [31:0] taken = cmd_index + {31'd0, cmd_valid && cmd_ready};
    integer s, b;
    always @(posedge clk) begin
        if (rst) begin
            for (s = 0; s < LATENCY; s = s + 1) rd_line[s] <= {BUS_W{1'b0}};
            {cmd_index, cycle, errors, error_address, error_kind} <= 0;
            last_write <= 32'hFFFF_FFFF;   // + 1 = 0 cycles when nothing is written
            finished   <= 1'b0;
            running    <= 1'b1;
        end else if (running) begin
            // the bytes as they are now (before this cycle's write), LATENCY cycles later
            rd_line[0] <= mem_rd_valid && in_range(mem_rd_addr)
                          ? mem[mem_rd_addr[BUS_LOG +: MEM_AW]] : {BUS_W{1'b0}};
            for (s = 1; s < LATENCY; s = s + 1) rd_line[s] <= rd_line[s-1];
            if (mem_rd_valid && !in_range(mem_rd_addr)) flag(mem_rd_addr, 32'd1);
            if (mem_wr_valid) begin
                if (!in_range(mem_wr_addr)) begin
                    flag(mem_wr_addr, 32'd2);
                end else begin
                    for (b = 0; b < BUS_BYTES; b = b + 1) begin
                        if (mem_wr_strb[b]) begin
                            if (mem_wr_addr + b < wr_lo || mem_wr_addr + b >= wr_hi)
                                flag(mem_wr_addr + b, 32'd3);
                            else
                                mem[mem_wr_addr[BUS_LOG +: MEM_AW]][b*8 +: 8] <= mem_wr_data[b*8 +: 8];
                        end
                    end
                end
                last_write <= cycle;
            end
            cmd_index <= taken;
            cycle     <= cycle + 32'd1;
            if (taken == n_cmds && idle) begin
                finished <= 1'b1;
                running  <= 1'b0;
            end else if (cycle + 32'd1 >= CYCLE_LIMIT) begin
                flag(cycle, 32'd4);
                finished <= 1'b1;
                running  <= 1'b0;
            end
        end
    end

    // ---- the sequencer: load a layer, reset, run it, dump its output, next -----------------
    string  dir, list_path, out_dir;
    integer list, results, status, index, out_first, out_last;
    initial begin
        if (!$value$plusargs("glensidec_dir=%s", dir)
            || !$value$plusargs("glensidec_list=%s", list_path)
            || !$value$plusargs("glensidec_out=%s", out_dir))
            $fatal(1, "tb_ws_accel_mem: +glensidec_dir, +glensidec_list, +glensidec_out needed");
        list = $fopen(list_path, "r");
        if (list == 0) $fatal(1, "tb_ws_accel_mem: cannot read %s", list_path);
        results = $fopen({out_dir, "/results.txt"}, "w");
        if (results == 0) $fatal(1, "tb_ws_accel_mem: cannot write to %s", out_dir);
        forever begin
            status = $fscanf(list, "%d %d %d %d %d %d %d", index, n_cmds, mem_words,
                             out_first, out_last, wr_lo, wr_hi);
            if (status != 7) break;
            if (mem_words > MEM_WORDS || n_cmds > CMD_DEPTH)
                $fatal(1, "tb_ws_accel_mem: layer %0d needs %0d memory and %0d command words (built for %0d and %0d)",
                       index, mem_words, n_cmds, MEM_WORDS, CMD_DEPTH);
            @(negedge clk);
            $readmemh($sformatf("%s/layer_%0d.mem.hex", dir, index), mem, 0, mem_words - 1);
            if (n_cmds > 0)
                $readmemh($sformatf("%s/layer_%0d.cmd.hex", dir, index), cmds, 0, n_cmds - 1);
            rst = 1'b1;
            @(negedge clk);
            @(negedge clk);
            rst = 1'b0;
            @(posedge finished);
            @(negedge clk);
            if (out_last >= out_first)
                $writememh($sformatf("%s/layer_%0d.out.hex", out_dir, index), mem, out_first,
                           out_last);
            $fdisplay(results, "%0d %0d %0d %0d %0d", index, last_write + 32'd1, errors,
                      error_address, error_kind);
            $fflush(results);
            layers_done = layers_done + 32'd1;
        end
        $fclose(list);
        $fclose(results);
        done = 1'b1;
        if ($test$plusargs("glensidec_finish")) $finish;
    end
endmodule
