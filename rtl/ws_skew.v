// ws_skew: a triangular delay buffer. Lane i is delayed by i cycles (REVERSE=0) or by
// LANES-1-i cycles (REVERSE=1). The array uses it to skew activations by row, weights
// and D by column on the way in, and to de-skew results on the way out so that a whole
// result row leaves in one beat.
module ws_skew #(
    parameter integer LANES   = 4,
    parameter integer WIDTH   = 8,
    parameter integer REVERSE = 0
) (
    // A one-lane buffer (an array with one column) registers nothing, so it leaves
    // the clock, reset and enable unused: that is expected, hence the waiver.
    /* verilator lint_off UNUSEDSIGNAL */
    input  wire                   clk,
    input  wire                   rst,   // synchronous, active high
    input  wire                   en,    // advance one step
    /* verilator lint_on UNUSEDSIGNAL */
    input  wire [LANES*WIDTH-1:0] din,
    output wire [LANES*WIDTH-1:0] dout
);
    genvar lane;
    generate
        for (lane = 0; lane < LANES; lane = lane + 1) begin : g_lane
            localparam integer DEPTH = (REVERSE != 0) ? (LANES - 1 - lane) : lane;
            if (DEPTH == 0) begin : g_through
                assign dout[lane*WIDTH +: WIDTH] = din[lane*WIDTH +: WIDTH];
            end else begin : g_delay
                // stage[0] is the newest value, stage[DEPTH-1] the oldest.
                reg [WIDTH-1:0] stage [0:DEPTH-1];
                integer s;
                always @(posedge clk) begin
                    if (rst) begin
                        for (s = 0; s < DEPTH; s = s + 1) stage[s] <= {WIDTH{1'b0}};
                    end else if (en) begin
                        stage[0] <= din[lane*WIDTH +: WIDTH];
                        for (s = 1; s < DEPTH; s = s + 1) stage[s] <= stage[s-1];
                    end
                end
                assign dout[lane*WIDTH +: WIDTH] = stage[DEPTH-1];
            end
        end
    endgenerate
endmodule
