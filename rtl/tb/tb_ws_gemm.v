`timescale 1ns/1ps
// tb_ws_gemm: simulation-only wrapper that lets software drive ws_top a whole GEMM at a
// time instead of one Python call per clock cycle.
//
// Software fills the memories and counts, raises start, and waits for done; the
// wrapper streams the memories into ws_top, stores every result row in r_mem and the
// cycle it left in r_cycle (cycle 0 = first cycle after start). The clock is generated
// here, so the simulator runs without calling back into Python every cycle.
//
// Memories: w_mem holds the weight beats in stream order; a_mem holds activation rows
// once (each M chunk x K fold block); t_mem holds one descriptor per tile,
// {use_d, emit, add, m_len[31:0], a_base[31:0]}, and the wrapper streams rows
// a_base .. a_base+m_len-1 of a_mem for it, like a DMA engine would. So activations that
// feed several N blocks are written by software once. d_mem holds the D rows in the
// order the tiles that set use_d consume them.
//
// Random gaps and back-pressure: each stream has a 16-bit LFSR and a threshold; a new
// beat is offered (or r_ready raised) only in cycles where the LFSR's low byte is
// >= the threshold, so threshold 0 means no gaps. Once offered, a beat stays valid
// until taken, as the valid/ready rules require.
//
// Bulk transfers: software may write the memories one word at a time through VPI, or
// (use_files=1, much faster) write hex files into the simulator's working directory;
// the wrapper then loads them with $readmemh at start and dumps the results with
// $writememh when it raises done. The file names are fixed (glensidec_*.hex).
//
// Protocol: start=1 -> (run) -> done=1 ; start=0 -> done=0.
module tb_ws_gemm #(
    parameter integer ROWS      = 4,
    parameter integer COLS      = 4,
    parameter integer IN_W      = 8,
    parameter integer ACC_W     = 32,
    parameter integer ACC_DEPTH = 1024,
    parameter integer FP        = 0,       // 1: binary32 array (IN_W = ACC_W = 32)
    parameter integer W_DEPTH   = 4096,    // weight beats per run
    parameter integer A_DEPTH   = 16384,   // activation rows per run
    parameter integer T_DEPTH   = 4096,    // tile descriptors per run
    parameter integer D_DEPTH   = 16384,   // D rows per run
    parameter integer R_DEPTH   = 16384    // result rows per run
) ();
    localparam integer T_BITS = 67;               // {use_d, emit, add, m_len, a_base}

    reg clk /*verilator public_flat_rd*/;
    initial clk = 1'b0;
    always #5 clk = ~clk;

    // ---- software-visible state (the only signals made public to VPI) ----
    reg             rst      /*verilator public_flat_rw*/ = 1'b1;
    reg             start    /*verilator public_flat_rw*/ = 1'b0;
    reg             done     /*verilator public_flat_rw*/;
    reg [31:0]      n_w      /*verilator public_flat_rw*/ = 32'd0;
    reg [31:0]      n_t      /*verilator public_flat_rw*/ = 32'd0; // tiles
    reg [31:0]      n_d      /*verilator public_flat_rw*/ = 32'd0;
    reg [31:0]      n_r      /*verilator public_flat_rw*/ = 32'd0;
    reg [31:0]      cycle    /*verilator public_flat_rw*/;
    reg [31:0]      stalls   /*verilator public_flat_rw*/; // r_valid && !r_ready
    reg             use_files /*verilator public_flat_rw*/ = 1'b0;
    reg [31:0]      n_a_rows  /*verilator public_flat_rw*/ = 32'd0; // a_mem rows to load
    reg [7:0]       gap_w    /*verilator public_flat_rw*/ = 8'd0;
    reg [7:0]       gap_a    /*verilator public_flat_rw*/ = 8'd0;
    reg [7:0]       gap_d    /*verilator public_flat_rw*/ = 8'd0;
    reg [7:0]       gap_r    /*verilator public_flat_rw*/ = 8'd0;
    reg [15:0]      seed     /*verilator public_flat_rw*/ = 16'h1;
    reg [COLS*IN_W-1:0]  w_mem   [0:W_DEPTH-1] /*verilator public_flat_rw*/;
    reg [ROWS*IN_W-1:0]  a_mem   [0:A_DEPTH-1] /*verilator public_flat_rw*/;
    reg [T_BITS-1:0]     t_mem   [0:T_DEPTH-1] /*verilator public_flat_rw*/;
    reg [COLS*ACC_W-1:0] d_mem   [0:D_DEPTH-1] /*verilator public_flat_rw*/;
    reg [COLS*ACC_W-1:0] r_mem   [0:R_DEPTH-1] /*verilator public_flat_rw*/;
    reg [31:0]           r_cycle [0:R_DEPTH-1] /*verilator public_flat_rw*/;

    // ---- stream pointers and random gates ----
    reg        busy;
    reg        finishing;                 // last result taken; done (and dump) next
    reg [31:0] w_ptr, t_ptr, row, d_ptr, r_ptr;  // row: within the current tile
    reg        w_held, a_held, d_held;    // offered last cycle and not taken
    reg [15:0] lfsr_w, lfsr_a, lfsr_d, lfsr_r;

    // x^16 + x^14 + x^13 + x^11 + 1, a maximal-length Fibonacci LFSR.
    function [15:0] lfsr_step(input [15:0] v);
        lfsr_step = {v[14:0], v[15] ^ v[13] ^ v[12] ^ v[10]};
    endfunction

    wire w_gate = lfsr_w[7:0] >= gap_w;
    wire a_gate = lfsr_a[7:0] >= gap_a;
    wire d_gate = lfsr_d[7:0] >= gap_d;
    wire r_gate = lfsr_r[7:0] >= gap_r;

    wire                  w_valid = busy && (w_ptr < n_w) && (w_held || w_gate);
    wire                  a_valid = busy && (t_ptr < n_t) && (a_held || a_gate);
    wire                  d_valid = busy && (d_ptr < n_d) && (d_held || d_gate);
    wire                  r_ready = busy && r_gate;
    wire                  w_ready, a_ready, d_ready, r_valid;
    wire [T_BITS-1:0]     tile   = t_mem[t_ptr[$clog2(T_DEPTH)-1:0]];
    // a_base is 32 bits in the descriptor; only log2(A_DEPTH) of them address a_mem.
    /* verilator lint_off UNUSEDSIGNAL */
    wire [31:0]           a_base = tile[31:0];
    /* verilator lint_on UNUSEDSIGNAL */
    wire [31:0]           m_len  = tile[63:32];
    wire                  a_last = (row + 1 == m_len);
    localparam integer    A_AW   = $clog2(A_DEPTH);
    wire [A_AW-1:0]       a_addr = a_base[A_AW-1:0] + row[A_AW-1:0];
    wire [COLS*ACC_W-1:0] r_data;

    ws_top #(.ROWS(ROWS), .COLS(COLS), .IN_W(IN_W), .ACC_W(ACC_W), .ACC_DEPTH(ACC_DEPTH),
             .FP(FP)) dut (
        .clk(clk), .rst(rst),
        .w_valid(w_valid), .w_ready(w_ready), .w_data(w_mem[w_ptr[$clog2(W_DEPTH)-1:0]]),
        .a_valid(a_valid), .a_ready(a_ready), .a_data(a_mem[a_addr]),
        .a_last(a_last), .a_add(tile[64]), .a_emit(tile[65]), .a_use_d(tile[66]),
        .a_acc_row({$clog2(ACC_DEPTH){1'b0}}),
        .d_valid(d_valid), .d_ready(d_ready), .d_data(d_mem[d_ptr[$clog2(D_DEPTH)-1:0]]),
        .r_valid(r_valid), .r_ready(r_ready), .r_data(r_data)
    );

    wire r_fire = r_valid && r_ready;

    task load_memories;
        begin
            if (n_w != 0)      $readmemh("glensidec_w.hex", w_mem, 0, n_w - 1);
            if (n_a_rows != 0) $readmemh("glensidec_a.hex", a_mem, 0, n_a_rows - 1);
            if (n_t != 0)      $readmemh("glensidec_t.hex", t_mem, 0, n_t - 1);
            if (n_d != 0)      $readmemh("glensidec_d.hex", d_mem, 0, n_d - 1);
        end
    endtask

    task dump_results;
        begin
            $writememh("glensidec_r.hex", r_mem, 0, n_r - 1);
            $writememh("glensidec_c.hex", r_cycle, 0, n_r - 1);
        end
    endtask

    initial begin
        finishing = 1'b0;
        busy   = 1'b0;
        done   = 1'b0;
        cycle  = 32'd0;
        stalls = 32'd0;
    end

    always @(posedge clk) begin
        if (rst || (!start && !busy)) begin
            busy      <= 1'b0;
            done      <= 1'b0;
            finishing <= 1'b0;
        end else if (finishing) begin
            // r_mem holds the last row now (it was written at the previous edge)
            if (use_files) dump_results();
            finishing <= 1'b0;
            done      <= 1'b1;
        end else if (start && !busy && !done) begin
            if (use_files) load_memories();
            busy   <= 1'b1;
            cycle  <= 32'd0;
            stalls <= 32'd0;
            {w_ptr, t_ptr, row, d_ptr, r_ptr} <= {5{32'd0}};
            {w_held, a_held, d_held}     <= 3'b000;
            lfsr_w <= seed ^ 16'h1111;
            lfsr_a <= seed ^ 16'h2222;
            lfsr_d <= seed ^ 16'h4444;
            lfsr_r <= seed ^ 16'h8888;
        end else if (busy) begin
            cycle  <= cycle + 1;
            stalls <= stalls + {31'd0, r_valid && !r_ready};
            lfsr_w <= lfsr_step(lfsr_w);
            lfsr_a <= lfsr_step(lfsr_a);
            lfsr_d <= lfsr_step(lfsr_d);
            lfsr_r <= lfsr_step(lfsr_r);
            w_held <= w_valid && !w_ready;
            a_held <= a_valid && !a_ready;
            d_held <= d_valid && !d_ready;
            if (w_valid && w_ready) w_ptr <= w_ptr + 1;
            if (a_valid && a_ready) begin
                row   <= a_last ? 32'd0 : row + 1;
                t_ptr <= t_ptr + {31'd0, a_last};
            end
            if (d_valid && d_ready) d_ptr <= d_ptr + 1;
            if (r_fire) begin
                r_mem[r_ptr[$clog2(R_DEPTH)-1:0]]   <= r_data;
                r_cycle[r_ptr[$clog2(R_DEPTH)-1:0]] <= cycle;
                r_ptr <= r_ptr + 1;
                if (r_ptr + 1 == n_r) begin
                    busy      <= 1'b0;
                    finishing <= 1'b1;
                end
            end
        end
    end
endmodule
