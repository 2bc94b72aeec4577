// ws_spad: the banked on-chip scratchpad for operands (int8 rows of ROW_BYTES bytes).
//
// BANKS banks of BANK_ROWS rows; a row address is {bank, row}, so the high address bits
// pick the bank and a double-buffered region is one bank (or a group of banks). Each
// bank is an SRAM with one write port and one read port (synchronous read: data the
// cycle after the request). The module has one write port (the DMA) and three read
// ports: port 0 feeds the weight stream, port 1 the activation stream, port 2 the
// epilogue's residual rows. Two reads of the same bank in one cycle conflict: ports 0 and
// 2 win and port 1 is not granted (rd1_grant low) and must retry; ports 0 and 2 never
// read the same bank at once (software keeps residual rows out of the weight banks; the
// cycle model refuses a program that would), and the compiler keeps weights and
// activations in different banks so port 1 is refused only by a residual read. Write masks are per byte. A read of the row written in the
// same cycle returns the old contents (read-before-write), as a 1R1W SRAM does.
//
// WRITE_ROWS > 1: the write port takes up to WRITE_ROWS consecutive rows at once (wr_addr
// + j for j < wr_rows, row j in wr_data's j-th row; ws_dma_load's groups). The rows are
// interleaved over WRITE_ROWS sub-banks by their low address bits (Gemmini's scratchpad
// splits its banks likewise), so consecutive rows are in different sub-banks and each
// sub-bank still has one write port; a read takes its row from the sub-bank its low bits
// name. Reads and conflicts are as above (the banks are the high address bits).
//
// W_LOAD > 1: port 0 reads W_LOAD consecutive rows at once (rd0_addr + k, row k in
// rd0_data's k-th row: the array's weight rows a beat), one from each of max(WRITE_ROWS,
// W_LOAD) sub-banks, each sub-bank at its own row; port 1 conflicts with the banks of
// the first and the last of them.
//
// Default: 16-byte rows (a 16x16 int8 array's operand row), 4 banks x 4096 rows = 256 KiB.
module ws_spad #(
    parameter integer ROW_BYTES = 16,
    parameter integer BANKS     = 4,
    parameter integer BANK_ROWS = 4096,
    parameter integer WRITE_ROWS = 1,    // rows one write may carry (a power of two)
    parameter integer W_LOAD     = 1     // rows port 0 reads at once (a power of two)
) (
    input  wire                     clk,
    input  wire                     wr_en,
    input  wire [$clog2(BANKS*BANK_ROWS)-1:0] wr_addr,
    input  wire [$clog2(WRITE_ROWS+1)-1:0] wr_rows,  // 1 .. WRITE_ROWS
    input  wire [WRITE_ROWS*ROW_BYTES*8-1:0] wr_data,
    input  wire [ROW_BYTES-1:0]     wr_mask,   // byte b written when wr_mask[b]
    input  wire                     rd0_en,
    input  wire [$clog2(BANKS*BANK_ROWS)-1:0] rd0_addr,
    output wire [W_LOAD*ROW_BYTES*8-1:0] rd0_data,  // the cycle after rd0_en
    input  wire                     rd1_en,
    input  wire [$clog2(BANKS*BANK_ROWS)-1:0] rd1_addr,
    output wire                     rd1_grant, // rd1_en and no conflict with port 0
    output wire [ROW_BYTES*8-1:0]   rd1_data,  // the cycle after a granted read
    input  wire                     rd2_en,
    input  wire [$clog2(BANKS*BANK_ROWS)-1:0] rd2_addr,
    output wire [ROW_BYTES*8-1:0]   rd2_data   // the cycle after rd2_en
);
    // BANKS and BANK_ROWS are powers of two: the bank is the address above the row bits.
    localparam integer ROW_W = $clog2(BANK_ROWS);
    localparam integer A_W   = $clog2(BANKS * BANK_ROWS);
    localparam integer SUB   = (WRITE_ROWS > W_LOAD) ? WRITE_ROWS : W_LOAD;  // sub-banks

    /* verilator lint_off UNUSEDSIGNAL */  // the row bits of the last row's address
    wire [A_W-1:0] rd0_end = rd0_addr + W_LOAD[A_W-1:0] - 1'b1;  // port 0's last row
    /* verilator lint_on UNUSEDSIGNAL */
    assign rd1_grant = rd1_en && !(rd0_en && (rd0_addr >> ROW_W) == (rd1_addr >> ROW_W))
                              && !(rd0_en && (rd0_end >> ROW_W) == (rd1_addr >> ROW_W))
                              && !(rd2_en && (rd2_addr >> ROW_W) == (rd1_addr >> ROW_W));

    generate
        if (SUB == 1) begin : g_one
            /* verilator lint_off UNUSEDSIGNAL */  // one row a write
            wire unused_rows = wr_rows[0];
            /* verilator lint_on UNUSEDSIGNAL */
            reg [ROW_BYTES*8-1:0] mem [0:BANKS*BANK_ROWS-1];
            reg [ROW_BYTES*8-1:0] q0, q1, q2;
            assign {rd0_data, rd1_data, rd2_data} = {q0, q1, q2};
            integer b;
            always @(posedge clk) begin
                if (rd0_en) q0 <= mem[rd0_addr];
                if (rd1_grant) q1 <= mem[rd1_addr];
                if (rd2_en) q2 <= mem[rd2_addr];
                if (wr_en) begin
                    for (b = 0; b < ROW_BYTES; b = b + 1) begin
                        if (wr_mask[b]) mem[wr_addr][b*8 +: 8] <= wr_data[b*8 +: 8];
                    end
                end
            end
        end else begin : g_sub
            localparam integer SUB_W = $clog2(SUB);
            localparam integer WN_W  = $clog2(WRITE_ROWS + 1);
            // each read port: every sub-bank's row read, and which sub-bank was asked
            wire [SUB*ROW_BYTES*8-1:0] q0, q1, q2;
            reg  [SUB_W-1:0] sel0, sel1, sel2;
            always @(posedge clk) begin
                if (rd0_en) sel0 <= rd0_addr[SUB_W-1:0];
                if (rd1_grant) sel1 <= rd1_addr[SUB_W-1:0];
                if (rd2_en) sel2 <= rd2_addr[SUB_W-1:0];
            end
            // port 0's row j (rd0_addr + j) is in sub-bank (sel0 + j) mod SUB
            genvar j;
            for (j = 0; j < W_LOAD; j = j + 1) begin : g_rd0
                localparam integer J_I = j;
                wire [SUB_W-1:0] from = sel0 + J_I[SUB_W-1:0];
                assign rd0_data[j*ROW_BYTES*8 +: ROW_BYTES*8] = q0[from*ROW_BYTES*8 +: ROW_BYTES*8];
            end
            assign rd1_data = q1[sel1*ROW_BYTES*8 +: ROW_BYTES*8];
            assign rd2_data = q2[sel2*ROW_BYTES*8 +: ROW_BYTES*8];
            // the write's rows, padded to SUB rows (rows past WRITE_ROWS are never written)
            wire [SUB*ROW_BYTES*8-1:0] wr_wide =
                {{((SUB-WRITE_ROWS)*ROW_BYTES*8){1'b0}}, wr_data};
            genvar k;
            for (k = 0; k < SUB; k = k + 1) begin : g_bank
                localparam integer K_I = k;
                localparam [SUB_W-1:0] K = K_I[SUB_W-1:0];
                reg [ROW_BYTES*8-1:0] mem [0:BANKS*BANK_ROWS/SUB-1];
                reg [ROW_BYTES*8-1:0] r0, r1, r2;
                assign q0[k*ROW_BYTES*8 +: ROW_BYTES*8] = r0;
                assign q1[k*ROW_BYTES*8 +: ROW_BYTES*8] = r1;
                assign q2[k*ROW_BYTES*8 +: ROW_BYTES*8] = r2;
                // the write's row j = (k - wr_addr) mod SUB lands here, if j < wr_rows
                wire [SUB_W-1:0] lane = K - wr_addr[SUB_W-1:0];
                /* verilator lint_off UNUSEDSIGNAL */  // its low bits are k
                wire [A_W-1:0]   row  = wr_addr + {{(A_W-SUB_W){1'b0}}, lane};
                // port 0 reads the row of its W_LOAD that is here: rd0_addr + (k - rd0_addr)
                // mod SUB (its first row's, rd0_addr, with one row a read)
                wire [SUB_W-1:0] lane0 = K - rd0_addr[SUB_W-1:0];
                wire [A_W-1:0]   row0 = (W_LOAD == 1) ? rd0_addr
                                      : rd0_addr + {{(A_W-SUB_W){1'b0}}, lane0};
                /* verilator lint_on UNUSEDSIGNAL */
                wire             we   = wr_en && {{(32-SUB_W){1'b0}}, lane}
                                                 < {{(32-WN_W){1'b0}}, wr_rows};
                integer b;
                always @(posedge clk) begin
                    if (rd0_en) r0 <= mem[row0[A_W-1:SUB_W]];
                    if (rd1_grant) r1 <= mem[rd1_addr[A_W-1:SUB_W]];
                    if (rd2_en) r2 <= mem[rd2_addr[A_W-1:SUB_W]];
                    if (we) begin
                        for (b = 0; b < ROW_BYTES; b = b + 1) begin
                            if (wr_mask[b])
                                mem[row[A_W-1:SUB_W]][b*8 +: 8] <=
                                    wr_wide[(lane*ROW_BYTES + b)*8 +: 8];
                        end
                    end
                end
            end
        end
    endgenerate
endmodule
