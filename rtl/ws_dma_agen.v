// ws_dma_agen: the row address generator of the DMA engines (strided 2-D/3-D and im2col).
//
// A transfer is count2 x count1 rows; row (i2, i1) starts at byte address
//   base + i2*stride2 + i1*stride1
// and, with bounds on (im2col), is padding when y = y0 + i2*y_step is outside
// [0, height) or x = x0 + i1*x_step is outside [0, width). The addresses are kept as
// running sums. `start` loads a transfer (row 0 is then current), `step` moves on by
// `step_rows` rows of the current line (1, or a group of rows ws_dma_load writes at once:
// never past the line's end, nor past a change between padding and inside rows);
// `run_left` is the rows of the line from the current one on whose padding is the
// current row's (with bounds and x_step 1 a run ends where x enters or leaves
// [0, width); else the rest of the line), and `last` marks the transfer's final row
// (group) for the current `step_rows`.
module ws_dma_agen #(
    parameter integer COUNT_W = 16,
    parameter integer SPAD_W  = 14,
    parameter integer STEP_W  = 1       // width of step_rows
) (
    input  wire               clk,
    input  wire               start,
    input  wire               step,
    input  wire [STEP_W-1:0]  step_rows,      // >= 1
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
    output wire               last,
    output wire [COUNT_W-1:0] run_left
);
    reg [COUNT_W-1:0] count1, count2, i1, i2;
    reg [31:0]        stride1, stride2, line_addr;
    reg               bounds;
    reg [15:0]        y, x, x0, y_step, x_step, height, width;

    wire [COUNT_W-1:0] rows = {{(COUNT_W-STEP_W){1'b0}}, step_rows};
    wire [COUNT_W-1:0] line_left = count1 - i1;
    wire end_of_line = (line_left == rows);
    assign last = end_of_line && (i2 == count2 - 1'b1);
    assign padding = bounds && ($signed(y) < 0 || $signed(y) >= $signed(height)
                                || $signed(x) < 0 || $signed(x) >= $signed(width));
    // the run of the current row: up to the next edge of [0, width) x crosses (x_step 1)
    wire        y_in   = !($signed(y) < 0 || $signed(y) >= $signed(height));
    wire        x_neg  = $signed(x) < 0;
    wire        x_in   = !x_neg && $signed(x) < $signed(width);
    wire [15:0] x_edge = x_neg ? 16'd0 - x : width - x;
    wire [31:0] edge32 = {16'd0, x_edge};
    wire [31:0] left32 = {{(32-COUNT_W){1'b0}}, line_left};
    wire        edged  = bounds && x_step != 16'd0 && y_in && (x_neg || x_in)
                         && edge32 < left32;
    assign run_left = edged ? edge32[COUNT_W-1:0] : line_left;

    always @(posedge clk) begin
        if (start) begin
            {count1, count2, stride1, stride2} <= {cmd_count1, cmd_count2, cmd_stride1, cmd_stride2};
            {bounds, x0, y_step, x_step, height, width}
                <= {cmd_bounds, cmd_x0, cmd_y_step, cmd_x_step, cmd_height, cmd_width};
            {i1, i2, y, x} <= {{(2*COUNT_W){1'b0}}, cmd_y0, cmd_x0};
            {addr, line_addr, spad_row} <= {cmd_base, cmd_base, cmd_spad_row};
        end else if (step) begin
            spad_row <= spad_row + {{(SPAD_W-STEP_W){1'b0}}, step_rows};
            if (end_of_line) begin
                i1 <= {COUNT_W{1'b0}};
                i2 <= i2 + 1'b1;
                line_addr <= line_addr + stride2;
                addr <= line_addr + stride2;
                y <= y + y_step;
                x <= x0;
            end else begin
                i1 <= i1 + rows;
                addr <= addr + (STEP_W == 1 ? stride1
                                            : stride1 * {{(32-STEP_W){1'b0}}, step_rows});
                // a group with bounds has x_step 0 or 1 (ws_dma_load groups no others)
                x <= x + (STEP_W == 1 || step_rows == 1 || x_step == 16'd0 ? x_step
                          : {{(16-STEP_W){1'b0}}, step_rows});
            end
        end
    end
endmodule
