// ws_epilogue: the output path from the accumulator to int8 memory rows.
//
// Per result row of COLS int32 accumulators, column by column (the quantizer's exact
// integer arithmetic, glensidec.lang.interp.requantize):
//
//   x   = acc + bias                                  (wraps at ACC_W bits, an i32 add)
//   p   = (x >>> pre) * mult                          (exact, 64-bit signed)
//   q   = post > 0 ? (p + 2^(post-1)) >>> post : p    (round half up, 64-bit)
//   y   = clamp(clamp(q + zero_point, -128, 127), low, high)   (saturate, then ReLU/clip)
//   out = pool ? max(y, prev) : y                     (max-pool: merge with a stored row)
//
// bias and mult are per column (per output channel); the controller presents the current
// N block's vectors with every row. Two register stages: a row accepted in cycle t leaves
// in cycle t + 2; one row per cycle. A waiting result (out_valid && !out_ready) freezes
// both stages, so in_ready = !(out_valid && !out_ready) and out_* stay stable.
module ws_epilogue #(
    parameter integer COLS  = 4,
    parameter integer OUT_W = 8      // signed output width (<= 32)
) (
    input  wire                   clk,
    input  wire                   rst,             // synchronous, active high
    // configuration, stable while rows flow
    input  wire [5:0]             cfg_pre,
    input  wire [5:0]             cfg_post,
    input  wire [OUT_W-1:0]       cfg_zero_point,  // signed
    input  wire [OUT_W-1:0]       cfg_low,         // signed clip bounds (ReLU: low = zero point)
    input  wire [OUT_W-1:0]       cfg_high,
    // accumulator rows
    input  wire                   in_valid,
    output wire                   in_ready,
    input  wire [COLS*ACC_W-1:0]  in_data,         // column c at [c*ACC_W +: ACC_W]
    input  wire [COLS*ACC_W-1:0]  in_bias,
    input  wire [COLS*32-1:0]     in_mult,         // signed 32-bit multipliers
    input  wire                   in_pool,         // merge with in_prev by max
    input  wire [COLS*OUT_W-1:0]  in_prev,
    // int8 rows
    output reg                    out_valid,
    input  wire                   out_ready,
    output reg  [COLS*OUT_W-1:0]  out_data
);
    // Accumulators, biases and multipliers are i32 as in the quantizer; the product is
    // formed exactly in 64 bits (like the interpreter's int64), rounding wraps there too.
    localparam integer ACC_W  = 32;
    localparam integer PROD_W = 64;

    wire en = !(out_valid && !out_ready);
    assign in_ready = en;

    // stage 1: bias add and pre-shift
    reg                   s1_valid, s1_pool;
    reg [COLS*ACC_W-1:0]  s1_value;
    reg [COLS*32-1:0]     s1_mult;
    reg [COLS*OUT_W-1:0]  s1_prev;
    wire [COLS*ACC_W-1:0] shifted;
    wire [COLS*OUT_W-1:0] result;

    // Saturation bounds of the output type, sign-extended to the product width.
    wire signed [PROD_W-1:0] type_min = -(64'sd1 <<< (OUT_W - 1));
    wire signed [PROD_W-1:0] type_max = (64'sd1 <<< (OUT_W - 1)) - 1;
    wire signed [PROD_W-1:0] zero_point = {{(PROD_W-OUT_W){cfg_zero_point[OUT_W-1]}}, cfg_zero_point};
    wire signed [PROD_W-1:0] round_bit = (cfg_post == 6'd0) ? {PROD_W{1'b0}}
                                         : ({{(PROD_W-1){1'b0}}, 1'b1} << (cfg_post - 6'd1));

    genvar c;
    generate
        for (c = 0; c < COLS; c = c + 1) begin : g_col
            wire signed [ACC_W-1:0]  biased = in_data[c*ACC_W +: ACC_W] + in_bias[c*ACC_W +: ACC_W];
            assign shifted[c*ACC_W +: ACC_W] = biased >>> cfg_pre;

            wire signed [PROD_W-1:0] value = {{32{s1_value[c*ACC_W+ACC_W-1]}}, s1_value[c*ACC_W +: ACC_W]};
            wire signed [PROD_W-1:0] mult = {{ACC_W{s1_mult[c*32+31]}}, s1_mult[c*32 +: 32]};
            wire signed [PROD_W-1:0] product = value * mult;
            wire signed [PROD_W-1:0] rounded = (product + round_bit) >>> cfg_post;
            wire signed [PROD_W-1:0] offset = rounded + zero_point;
            wire signed [OUT_W-1:0]  saturated = (offset < type_min) ? type_min[OUT_W-1:0]
                                               : (offset > type_max) ? type_max[OUT_W-1:0]
                                               : offset[OUT_W-1:0];
            wire signed [OUT_W-1:0]  low = cfg_low, high = cfg_high;
            wire signed [OUT_W-1:0]  clipped = (saturated < low) ? low
                                             : (saturated > high) ? high : saturated;
            wire signed [OUT_W-1:0]  prev = s1_prev[c*OUT_W +: OUT_W];
            assign result[c*OUT_W +: OUT_W] = (s1_pool && prev > clipped) ? prev : clipped;
        end
    endgenerate

    always @(posedge clk) begin
        if (rst) begin
            s1_valid  <= 1'b0;
            out_valid <= 1'b0;
        end else if (en) begin
            s1_valid  <= in_valid;
            out_valid <= s1_valid;
        end
        if (en) begin
            s1_value <= shifted;
            s1_mult  <= in_mult;
            s1_prev  <= in_prev;
            s1_pool  <= in_pool;
            out_data <= result;
        end
    end
endmodule
