// ws_fifo: a small synchronous FIFO (the command queues of ws_accel).
//
// DEPTH entries (a power of two, >= 2) of WIDTH bits. head is the oldest entry
// (meaningless when empty); push and pop may happen in the same cycle, also when full
// (the popped slot is reused) but not when empty. No bypass: a pushed entry is visible
// the cycle after the push.
module ws_fifo #(
    parameter integer WIDTH = 8,
    parameter integer DEPTH = 4
) (
    input  wire             clk,
    input  wire             rst,      // synchronous, active high
    input  wire             push,
    input  wire [WIDTH-1:0] din,
    input  wire             pop,
    output wire [WIDTH-1:0] head,
    output wire             empty,
    output wire             full
);
    localparam integer AW = $clog2(DEPTH);

    reg [WIDTH-1:0] mem [0:DEPTH-1];
    reg [AW:0]      wr_ptr, rd_ptr;   // one extra bit tells full from empty

    assign head  = mem[rd_ptr[AW-1:0]];
    assign empty = wr_ptr == rd_ptr;
    assign full  = wr_ptr == {~rd_ptr[AW], rd_ptr[AW-1:0]};

    always @(posedge clk) begin
        if (rst) begin
            wr_ptr <= {(AW+1){1'b0}};
            rd_ptr <= {(AW+1){1'b0}};
        end else begin
            if (push) begin
                mem[wr_ptr[AW-1:0]] <= din;
                wr_ptr <= wr_ptr + 1'b1;
            end
            if (pop) rd_ptr <= rd_ptr + 1'b1;
        end
    end
endmodule
