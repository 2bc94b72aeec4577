// ws_dma_agen: the row address generator of the DMA engines (strided 2-D/3-D and im2col).
//
// A transfer is count2 x count1 rows; row (i2, i1) starts at byte address
//   base + i2*stride2 + i1*stride1
// and, with bounds on (im2col), is padding when y = y0 + i2*y_step is outside
// [0, height) or x = x0 + i1*x_step is outside [0, width). The addresses are kept as
// running sums (no multiplier). `start` loads a transfer (row 0 is then current),
// `step` moves to the next row; `last` marks the transfer's final row.
module ws_dma_agen #(
    parameter integer COUNT_W = 16,
    parameter integer SPAD_W  = 14
) (
    input  wire               clk,
    input  wire               start,
    input  wire               step,
    input  wire [31:0]        cmd_base,
    input  wire [COUNT_W-1:0] cmd_count1,     // >= 1
    input  wire [31:0]        cmd_stride1,
    input  wire [COUNT_W-1:0] cmd_count2,     // >= 1
    input  wire [31:0]        cmd_stride2,
    input  wire [SPAD_W-1:0]  cmd_spad_row,
    input  wire               cmd_bounds,
    input  wire [15:0]        cmd_y0,         // signed
    input  wire [15:0]        cmd_y_step,
    input  wire [15:0]        cmd_height,     // < 2^15
    input  wire [15:0]        cmd_x0,         // signed
    input  wire [15:0]        cmd_x_step,
    input  wire [15:0]        cmd_width,      // < 2^15
    output reg  [31:0]        addr,
    output reg  [SPAD_W-1:0]  spad_row,
    output wire               padding,
    output wire               last
);
    reg [COUNT_W-1:0] count1, count2, i1, i2;
    reg [31:0]        stride1, stride2, line_addr;
    reg               bounds;
    reg [15:0]        y, x, x0, y_step, x_step, height, width;

    wire end_of_line = (i1 == count1 - 1'b1);
    assign last = end_of_line && (i2 == count2 - 1'b1);
    assign padding = bounds && ($signed(y) < 0 || $signed(y) >= $signed(height)
                                || $signed(x) < 0 || $signed(x) >= $signed(width));

    always @(posedge clk) begin
        if (start) begin
            {count1, count2, stride1, stride2} <= {cmd_count1, cmd_count2, cmd_stride1, cmd_stride2};
            {bounds, x0, y_step, x_step, height, width}
                <= {cmd_bounds, cmd_x0, cmd_y_step, cmd_x_step, cmd_height, cmd_width};
            {i1, i2, y, x} <= {{(2*COUNT_W){1'b0}}, cmd_y0, cmd_x0};
            {addr, line_addr, spad_row} <= {cmd_base, cmd_base, cmd_spad_row};
        end else if (step) begin
            spad_row <= spad_row + 1'b1;
            if (end_of_line) begin
                i1 <= {COUNT_W{1'b0}};
                i2 <= i2 + 1'b1;
                line_addr <= line_addr + stride2;
                addr <= line_addr + stride2;
                y <= y + y_step;
                x <= x0;
            end else begin
                i1 <= i1 + 1'b1;
                addr <= addr + stride1;
                x <= x + x_step;
            end
        end
    end
endmodule
