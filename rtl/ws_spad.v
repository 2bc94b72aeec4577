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
// Default: 16-byte rows (a 16x16 int8 array's operand row), 4 banks x 4096 rows = 256 KiB.
module ws_spad #(
    parameter integer ROW_BYTES = 16,
    parameter integer BANKS     = 4,
    parameter integer BANK_ROWS = 4096
) (
    input  wire                     clk,
    input  wire                     wr_en,
    input  wire [$clog2(BANKS*BANK_ROWS)-1:0] wr_addr,
    input  wire [ROW_BYTES*8-1:0]   wr_data,
    input  wire [ROW_BYTES-1:0]     wr_mask,   // byte b written when wr_mask[b]
    input  wire                     rd0_en,
    input  wire [$clog2(BANKS*BANK_ROWS)-1:0] rd0_addr,
    output reg  [ROW_BYTES*8-1:0]   rd0_data,  // the cycle after rd0_en
    input  wire                     rd1_en,
    input  wire [$clog2(BANKS*BANK_ROWS)-1:0] rd1_addr,
    output wire                     rd1_grant, // rd1_en and no conflict with port 0
    output reg  [ROW_BYTES*8-1:0]   rd1_data,  // the cycle after a granted read
    input  wire                     rd2_en,
    input  wire [$clog2(BANKS*BANK_ROWS)-1:0] rd2_addr,
    output reg  [ROW_BYTES*8-1:0]   rd2_data   // the cycle after rd2_en
);
    // BANKS and BANK_ROWS are powers of two: the bank is the address above the row bits.
    localparam integer ROW_W = $clog2(BANK_ROWS);

    reg [ROW_BYTES*8-1:0] mem [0:BANKS*BANK_ROWS-1];

    assign rd1_grant = rd1_en && !(rd0_en && (rd0_addr >> ROW_W) == (rd1_addr >> ROW_W))
                              && !(rd2_en && (rd2_addr >> ROW_W) == (rd1_addr >> ROW_W));

    integer b;
    always @(posedge clk) begin
        if (rd0_en) rd0_data <= mem[rd0_addr];
        if (rd1_grant) rd1_data <= mem[rd1_addr];
        if (rd2_en) rd2_data <= mem[rd2_addr];
        if (wr_en) begin
            for (b = 0; b < ROW_BYTES; b = b + 1) begin
                if (wr_mask[b]) mem[wr_addr][b*8 +: 8] <= wr_data[b*8 +: 8];
            end
        end
    end
endmodule
