// ws_epilogue: the output path from the accumulator to int8 memory rows.
//
// Per result row of COLS int32 accumulators, column by column (the quantizer's exact
// integer arithmetic, glensidec.lang.interp.requantize):
//
//   x   = acc + bias                                  (wraps at ACC_W bits, an i32 add)
//   p   = (x >>> pre) * mult                          (32×32 signed, exact 64-bit result)
//   q   = post > 0 ? (p + 2^(post-1)) >>> post : p    (round half up)
//   y   = clamp(clamp(q + zero_point, -128, 127), low, high)   (saturate, then ReLU/clip)
//   with a residual (cfg_residual), the quantized residual add of the next layer too:
//   z   = y * res_self + r * res_mult + res_offset    (the i32 arithmetic; see RES_W, Z_W)
//   y'  = clamp(requantize(z, res_multiplier, res_pre, res_post) + res_zero_point,
//               -128, 127, then res_low, res_high)   (the same arithmetic as above)
//   out = pool ? max(y', prev) : y'                   (max-pool: merge with a stored row)
//   or, early (cfg_res_early), a residual added to the accumulator before requantizing:
//   x   = acc + bias + r * res_mult + res_offset      (i32), then y as above is the result
//
// The residual's multipliers res_self and res_mult are RES_W-bit signed numbers and the late
// sum z fits Z_W = OUT_W + RES_W bits (the quantizer's add_dynamic: multipliers up to 2^14,
// |z| < 2^23): the compile refuses a residual add outside these ranges
// (glensidec.hardware.accel.residual_range_error), so the narrower products and sums here
// are the i32 arithmetic exactly (nothing wraps). The early form's sum stays 32 bits.
//
// r is the int8 residual row of the accepted row: it is presented (res_data) in the
// cycle after the row was accepted and held while the stages are frozen, as a scratchpad
// read issued with the acceptance delivers it. Both requantizations of a residual row
// happen in stage 2 (a long combinational path kept so the latency stays two cycles).
//
// bias and mult are per column (per output channel); the controller presents the current
// N block's vectors with every row. Two register stages: a row accepted in cycle t leaves
// in cycle t + 2; one row per cycle. A waiting result (out_valid && !out_ready) freezes
// both stages, so in_ready = !(out_valid && !out_ready) and out_* stay stable.
module ws_epilogue #(
    parameter integer COLS  = 4,
    parameter integer OUT_W = 8,     // signed output width (<= 32)
    parameter integer RES_W = 16     // signed width of res_self and res_mult (< 32 - OUT_W)
) (
    input  wire                   clk,
    input  wire                   rst,             // synchronous, active high
    // configuration, stable while rows flow
    input  wire [5:0]             cfg_pre,
    input  wire [5:0]             cfg_post,
    input  wire [OUT_W-1:0]       cfg_zero_point,  // signed
    input  wire [OUT_W-1:0]       cfg_low,         // signed clip bounds (ReLU: low = zero point)
    input  wire [OUT_W-1:0]       cfg_high,
    input  wire                   cfg_residual,    // add the residual row (stage 2)
    input  wire                   cfg_res_early,   // ... to the accumulator, before requantizing
    /* verilator lint_off UNUSEDSIGNAL */  // bits above RES_W: zero or sign (compile check)
    input  wire [31:0]            cfg_res_self,    // signed multipliers of y and r
    input  wire [31:0]            cfg_res_mult,
    /* verilator lint_on UNUSEDSIGNAL */
    input  wire [31:0]            cfg_res_offset,  // signed, the zero-point corrections
    input  wire [31:0]            cfg_res_multiplier,
    input  wire [5:0]             cfg_res_pre,
    input  wire [5:0]             cfg_res_post,
    input  wire [OUT_W-1:0]       cfg_res_zero_point,
    input  wire [OUT_W-1:0]       cfg_res_low,
    input  wire [OUT_W-1:0]       cfg_res_high,
    input  wire [COLS*OUT_W-1:0]  res_data,        // the residual row, a cycle after its row
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
    // Accumulators, biases and multipliers are i32 as in the quantizer. The layer's
    // requantize (ws_requantize) is a 32×32 signed multiplication with its exact 64-bit
    // result, the residual's a Z_W×32 one; the residual products are OUT_W × RES_W
    // (y and r are int8), exact in Z_W bits.
    localparam integer ACC_W = 32;
    localparam integer Z_W   = OUT_W + RES_W;
    wire signed [RES_W-1:0] res_self = cfg_res_self[RES_W-1:0];
    wire signed [RES_W-1:0] res_mult = cfg_res_mult[RES_W-1:0];
    wire signed [Z_W-1:0]   res_offset = cfg_res_offset[Z_W-1:0];  // the late sum's (mod 2^Z_W)
    wire en = !(out_valid && !out_ready);
    assign in_ready = en;

    // stage 1: bias add
    reg                   s1_valid, s1_pool;
    reg [COLS*ACC_W-1:0]  s1_value;
    reg [COLS*32-1:0]     s1_mult;
    reg [COLS*OUT_W-1:0]  s1_prev;
    wire [COLS*ACC_W-1:0] biased;
    wire [COLS*OUT_W-1:0] result;

    genvar c;
    generate
        for (c = 0; c < COLS; c = c + 1) begin : g_col
            assign biased[c*ACC_W +: ACC_W] = in_data[c*ACC_W +: ACC_W] + in_bias[c*ACC_W +: ACC_W];

            // stage 2: r · res_mult (an OUT_W × RES_W product, exact in Z_W bits) serves
            // both residual forms: early, it joins the biased sum before the requantize
            wire signed [OUT_W-1:0] r = res_data[c*OUT_W +: OUT_W];
            wire signed [Z_W-1:0] r_scaled;
            ws_mul #(.A_W(RES_W), .B_W(OUT_W)) u_r_scaled (.a(res_mult), .b(r), .y(r_scaled));
            wire signed [ACC_W-1:0] r_wide = {{(ACC_W-Z_W){r_scaled[Z_W-1]}}, r_scaled};
            wire signed [ACC_W-1:0] summed = s1_value[c*ACC_W +: ACC_W]
                                             + ((cfg_residual && cfg_res_early)
                                                ? r_wide + cfg_res_offset : 32'd0);
            wire signed [ACC_W-1:0] shifted = summed >>> cfg_pre;
            wire signed [OUT_W-1:0] clipped;
            ws_requantize #(.OUT_W(OUT_W)) u_requantize (
                .x(shifted), .mult(s1_mult[c*32 +: 32]), .post(cfg_post),
                .zero_point(cfg_zero_point), .low(cfg_low), .high(cfg_high), .y(clipped));
            // ... or after it: y · res_self (OUT_W × RES_W too) + r · res_mult + offset,
            // in Z_W bits, and the residual add's own requantize (of a Z_W-bit sum)
            wire signed [Z_W-1:0] y_scaled;
            ws_mul #(.A_W(RES_W), .B_W(OUT_W)) u_y_scaled (.a(res_self), .b(clipped),
                                                         .y(y_scaled));
            wire signed [Z_W-1:0] res_sum = y_scaled + r_scaled + res_offset;
            wire signed [Z_W-1:0] res_shifted = res_sum >>> cfg_res_pre;
            wire signed [OUT_W-1:0] res_clipped;
            ws_requantize #(.OUT_W(OUT_W), .X_W(Z_W)) u_res_requantize (
                .x(res_shifted), .mult(cfg_res_multiplier), .post(cfg_res_post),
                .zero_point(cfg_res_zero_point), .low(cfg_res_low), .high(cfg_res_high),
                .y(res_clipped));
            wire signed [OUT_W-1:0]  value_out = (cfg_residual && !cfg_res_early) ? res_clipped
                                                                                : clipped;
            wire signed [OUT_W-1:0]  prev = s1_prev[c*OUT_W +: OUT_W];
            assign result[c*OUT_W +: OUT_W] = (s1_pool && prev > value_out) ? prev : value_out;
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
            s1_value <= biased;
            s1_mult  <= in_mult;
            s1_prev  <= in_prev;
            s1_pool  <= in_pool;
            out_data <= result;
        end
    end
endmodule
