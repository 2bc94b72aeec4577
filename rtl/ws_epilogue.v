// ws_epilogue: the output path from the accumulator to int8 memory rows.
//
// Per result row of COLS int32 accumulators, column by column (the quantizer's exact
// integer arithmetic, glensidec.lang.interp.requantize):
//
//   x   = (acc + bias) * scale                        (each wraps at ACC_W bits, i32; scale
//                                                     per column, int8: a run-time channel
//                                                     scale, squeeze-excite's, or 1)
//   p   = (x >>> pre) * mult                          (32×32 signed, exact 64-bit result)
//   q   = post > 0 ? (p + 2^(post-1)) >>> post : p    (round half up)
//   y   = clamp(clamp(q + zero_point, -128, 127), low, high)   (saturate, then ReLU/clip)
//   y   = cfg_lookup ? table[y + 128] : y       (an element-wise non-linearity: hardswish,
//                                               sigmoid, SiLU … as the IR's int8 lookup)
//   with a residual (cfg_residual), the quantized residual add of the next layer too:
//   z   = y * res_self + r * res_mult + res_offset    (the i32 arithmetic; see RES_W, Z_W)
//   out = clamp(requantize(z, res_multiplier, res_pre, res_post) + res_zero_point,
//               -128, 127, then res_low, res_high)   (the same arithmetic as above)
//   or, with cfg_res_product, the product of the two rows instead of y's multiple:
//   z   = y * r + r * res_mult + res_offset           (y · r: int8 × int8, exact in Z_W bits)
//   or, early (cfg_res_early), a residual added to the accumulator before requantizing:
//   x   = acc + bias + r * res_mult + res_offset      (i32), then y as above is the result
//   or, per row (cfg_res_rows), the residual row holds two values of its output row in its
//   low 64 bits (little-endian i32: an offset o, then p = l * 2^16 + h, h and l signed
//   16-bit) instead of an addend, and acc becomes, before the bias,
//   t   = (acc + o) * h + trunc((acc + o) * l / 2^cfg_res_pre)   (each product its low 32
//                                                   bits, the i32 wrap; trunc toward zero)
//   (a division of each row by a run-time value, LayerNorm's deviation or softmax's sum,
//   as a fixed-point reciprocal per row: h its whole part, l its fraction); the residual add
//   itself is off. It needs COLS * OUT_W >= 64 (else cfg_res_rows is ignored).
//
// The residual's multipliers res_self and res_mult are RES_W-bit signed numbers and the late
// sum z fits Z_W = OUT_W + RES_W bits (the quantizer's add_dynamic: multipliers up to 2^14,
// |z| < 2^23): the compile refuses a residual add outside these ranges
// (glensidec.hardware.accel.residual_range_error), so the narrower products and sums here
// are the i32 arithmetic exactly (nothing wraps). The early form's sum stays 32 bits.
//
// Time-multiplexed: LANES columns' arithmetic (a requantize product each, two with a
// residual) serves all COLS columns, a group of LANES columns per cycle, so a row takes
// GROUPS = COLS / LANES cycles and the epilogue costs LANES columns of multipliers, not
// COLS (docs/hardware.md weighs the cycles). Rows wait for the lanes in a FIFO of DEPTH
// rows, so the array, which emits a tile's rows one per cycle, freezes only when it is full.
//
//   cycle t      a row is accepted (in_valid && in_ready)
//   cycle t + 1  it is in stage 1, and its residual row r arrives (res_data: a scratchpad
//                read issued with the acceptance); both enter the FIFO
//   t + 2 …      at the FIFO's head, the lanes compute column group 0, 1, …; groups before
//                the last wait in `part`; the last one waits until the output register is
//                free (out_valid && !out_ready holds it), then leaves the FIFO with the row
//                into out_data (out_valid the cycle after)
//
// in_ready = FIFO rows + stage 1 < DEPTH: a row accepted now always finds room. With
// LANES = COLS a row leaves 3 cycles after it was accepted, one per cycle.
// bias and mult are per column (per output channel) and stable while rows flow: the
// controller changes them only once every row has left (ws_accel's CONFIG).
module ws_epilogue #(
    parameter integer COLS  = 4,
    parameter integer OUT_W = 8,     // signed output width (<= 32)
    parameter integer RES_W = 16,    // signed width of res_self and res_mult (< 32 - OUT_W)
    parameter integer LANES = COLS,  // columns computed per cycle (divides COLS)
    parameter integer DEPTH = 2      // rows waiting for the lanes (a power of two, >= 2)
) (
    input  wire                   clk,
    input  wire                   rst,             // synchronous, active high
    // configuration, stable while rows flow
    input  wire [5:0]             cfg_pre,
    input  wire [5:0]             cfg_post,
    input  wire [OUT_W-1:0]       cfg_zero_point,  // signed
    input  wire [OUT_W-1:0]       cfg_low,         // signed clip bounds (ReLU: low = zero point)
    input  wire [OUT_W-1:0]       cfg_high,
    input  wire                   cfg_lookup,      // map y through cfg_table
    input  wire [(OUT_W<<OUT_W)-1:0] cfg_table,    // entry i at [i*OUT_W +: OUT_W], for y = i - 2^(OUT_W-1)
    input  wire                   cfg_residual,    // add the residual row
    input  wire                   cfg_res_early,   // ... to the accumulator, before requantizing
    input  wire                   cfg_res_product, // ... late, as y · r (res_self unused)
    input  wire                   cfg_res_rows,    // ... as the row's offset and reciprocal
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
    input  wire [COLS*OUT_W-1:0]  in_scale,        // signed per-column scales (1: none)
    // int8 rows
    output reg                    out_valid,
    input  wire                   out_ready,
    output reg  [COLS*OUT_W-1:0]  out_data
);
    // Accumulators, biases and multipliers are i32 as in the quantizer. The layer's
    // requantize (ws_requantize) is a 32×32 signed multiplication with its exact 64-bit
    // result, the residual's a Z_W×32 one; the residual products are OUT_W × RES_W
    // (y and r are int8), exact in Z_W bits.
    localparam integer ACC_W  = 32;
    localparam integer Z_W    = OUT_W + RES_W;
    localparam integer GROUPS = COLS / LANES;
    localparam integer GW     = (GROUPS > 1) ? $clog2(GROUPS) : 1;
    localparam integer AW     = $clog2(DEPTH);
    localparam integer ROW_W  = COLS * (ACC_W + OUT_W);   // {residual row, accumulators}
    localparam integer LAST_I = GROUPS - 1;
    localparam [GW-1:0] LAST  = LAST_I[GW-1:0];
    wire signed [RES_W-1:0] res_self = cfg_res_self[RES_W-1:0];
    wire signed [RES_W-1:0] res_mult = cfg_res_mult[RES_W-1:0];
    wire signed [Z_W-1:0]   res_offset = cfg_res_offset[Z_W-1:0];  // the late sum's (mod 2^Z_W)
    localparam integer ROW_OK = (COLS * OUT_W >= 64) ? 1 : 0;  // room for the per-row values
    wire per_row = cfg_residual && cfg_res_rows && ROW_OK != 0;

    // stage 1: the accepted row, waiting a cycle for its residual row
    reg                  s1_valid;
    reg [COLS*ACC_W-1:0] s1_data;

    // the FIFO (no bypass: a row pushed in cycle t is at the head from t + 1)
    reg  [ROW_W-1:0] fifo [0:DEPTH-1];
    reg  [AW:0]      wr_ptr, rd_ptr;    // one extra bit tells full from empty
    wire [AW:0]      count = wr_ptr - rd_ptr;
    wire [ROW_W-1:0] head = fifo[rd_ptr[AW-1:0]];
    /* verilator lint_off WIDTHEXPAND */
    assign in_ready = count + s1_valid < DEPTH;
    /* verilator lint_on WIDTHEXPAND */

    // the lanes: column group `phase` of the head row
    reg  [GW-1:0] phase;
    wire lane_last = phase == LAST;
    wire lane_step = count != {(AW+1){1'b0}} && (!lane_last || !out_valid || out_ready);
    wire lane_done = lane_step && lane_last;
    wire [LANES*OUT_W-1:0] lane_y;

    genvar e, g;
    generate
        for (e = 0; e < LANES; e = e + 1) begin : g_lane
            // this lane's column in each group, selected by phase
            wire [GROUPS*ACC_W-1:0] accs, biases, mults;
            wire [GROUPS*OUT_W-1:0] residuals, scales;
            for (g = 0; g < GROUPS; g = g + 1) begin : g_group
                localparam integer C = g * LANES + e;
                assign accs[g*ACC_W +: ACC_W]      = head[C*ACC_W +: ACC_W];
                assign residuals[g*OUT_W +: OUT_W] = head[COLS*ACC_W + C*OUT_W +: OUT_W];
                assign biases[g*ACC_W +: ACC_W]    = in_bias[C*ACC_W +: ACC_W];
                assign mults[g*32 +: 32]           = in_mult[C*32 +: 32];
                assign scales[g*OUT_W +: OUT_W]    = in_scale[C*OUT_W +: OUT_W];
            end
            wire [ACC_W-1:0] acc, bias;
            wire [31:0]      mult;
            wire signed [OUT_W-1:0] r, scale;
            if (GROUPS > 1) begin : g_select
                assign acc  = accs[phase*ACC_W +: ACC_W];
                assign bias = biases[phase*ACC_W +: ACC_W];
                assign mult = mults[phase*32 +: 32];
                assign r    = residuals[phase*OUT_W +: OUT_W];
                assign scale = scales[phase*OUT_W +: OUT_W];
            end else begin : g_one
                assign acc  = accs;
                assign bias = biases;
                assign mult = mults;
                assign r    = residuals;
                assign scale = scales;
            end

            // r · res_mult (an OUT_W × RES_W product, exact in Z_W bits) serves both
            // residual forms: early, it joins the biased sum before the requantize
            wire signed [Z_W-1:0] r_scaled;
            ws_mul #(.A_W(RES_W), .B_W(OUT_W)) u_r_scaled (.a(res_mult), .b(r), .y(r_scaled));
            wire signed [ACC_W-1:0] r_wide = {{(ACC_W-Z_W){r_scaled[Z_W-1]}}, r_scaled};
            // per row: the head row's offset and fixed-point reciprocal (the residual
            // row's low 64 bits: o, then p = l·2^16 + h) scale the accumulator first
            wire [63:0] row_values;
            if (ROW_OK != 0) begin : g_row_values
                assign row_values = head[COLS*ACC_W +: 64];
            end else begin : g_no_row_values
                assign row_values = 64'd0;
            end
            wire signed [ACC_W-1:0] row_x = acc + row_values[31:0];
            wire signed [15:0] row_h = row_values[47:32];
            // l = (p − h) / 2^16: the high half plus the borrow h's sign took from it
            wire signed [16:0] row_l = {row_values[63], row_values[63:48]}
                                       + {16'd0, row_values[47]};
            // each product only its low ACC_W bits (the i32 wrap): ws_mul's Y_W builds no
            // bit above them
            wire [ACC_W-1:0] row_whole;
            wire signed [ACC_W-1:0] part;
            ws_mul #(.A_W(ACC_W), .B_W(16), .Y_W(ACC_W)) u_row_h (.a(row_x), .b(row_h),
                                                               .y(row_whole));
            ws_mul #(.A_W(ACC_W), .B_W(17), .Y_W(ACC_W)) u_row_l (.a(row_x), .b(row_l),
                                                               .y(part));
            // a division by 2^cfg_res_pre toward zero: negative values rounded up first (all
            // signed, so >>> shifts arithmetically)
            wire signed [ACC_W-1:0] round_up = part[ACC_W-1]
                ? ({{(ACC_W-1){1'b0}}, 1'b1} << cfg_res_pre) - 1'b1 : {ACC_W{1'b0}};
            wire signed [ACC_W-1:0] part_shifted = (part + round_up) >>> cfg_res_pre;
            wire signed [ACC_W-1:0] row_t = row_whole + part_shifted;
            wire signed [ACC_W-1:0] summed = (per_row ? row_t : acc) + bias
                                             + ((cfg_residual && cfg_res_early)
                                                ? r_wide + cfg_res_offset : 32'd0);
            // the channel scale: an ACC_W × OUT_W product, its low ACC_W bits (the i32 wrap)
            wire signed [ACC_W-1:0] scaled;
            ws_mul #(.A_W(ACC_W), .B_W(OUT_W), .Y_W(ACC_W)) u_scale (.a(summed), .b(scale),
                                                                  .y(scaled));
            wire signed [ACC_W-1:0] shifted = scaled >>> cfg_pre;
            wire signed [OUT_W-1:0] requantized, clipped;
            ws_requantize #(.OUT_W(OUT_W)) u_requantize (
                .x(shifted), .mult(mult), .post(cfg_post),
                .zero_point(cfg_zero_point), .low(cfg_low), .high(cfg_high), .y(requantized));
            // the lookup table: entry y + 2^(OUT_W-1), i.e. y with its sign bit flipped
            wire [OUT_W-1:0] entry = {~requantized[OUT_W-1], requantized[OUT_W-2:0]};
            assign clipped = cfg_lookup ? cfg_table[entry*OUT_W +: OUT_W] : requantized;
            // ... or after it: y · res_self (OUT_W × RES_W too) + r · res_mult + offset,
            // in Z_W bits, and the residual add's own requantize (of a Z_W-bit sum)
            // (with cfg_res_product the same multiplier takes r, sign-extended, for
            // res_self: y · r, an element-wise product of the two int8 rows)
            wire signed [Z_W-1:0] y_scaled;
            wire signed [RES_W-1:0] y_factor = cfg_res_product
                ? {{(RES_W-OUT_W){r[OUT_W-1]}}, r} : res_self;
            ws_mul #(.A_W(RES_W), .B_W(OUT_W)) u_y_scaled (.a(y_factor), .b(clipped),
                                                         .y(y_scaled));
            wire signed [Z_W-1:0] res_sum = y_scaled + r_scaled + res_offset;
            wire signed [Z_W-1:0] res_shifted = res_sum >>> cfg_res_pre;
            wire signed [OUT_W-1:0] res_clipped;
            ws_requantize #(.OUT_W(OUT_W), .X_W(Z_W)) u_res_requantize (
                .x(res_shifted), .mult(cfg_res_multiplier), .post(cfg_res_post),
                .zero_point(cfg_res_zero_point), .low(cfg_res_low), .high(cfg_res_high),
                .y(res_clipped));
            assign lane_y[e*OUT_W +: OUT_W] = (cfg_residual && !cfg_res_early && !cfg_res_rows)
                                              ? res_clipped : clipped;
        end

        // the groups before the last wait in `part` for the last one
        if (GROUPS > 1) begin : g_part
            reg [(GROUPS-1)*LANES*OUT_W-1:0] part;
            for (g = 0; g < GROUPS - 1; g = g + 1) begin : g_keep
                always @(posedge clk)
                    if (lane_step && phase == g) part[g*LANES*OUT_W +: LANES*OUT_W] <= lane_y;
            end
            always @(posedge clk) if (lane_done) out_data <= {lane_y, part};
        end else begin : g_whole
            always @(posedge clk) if (lane_done) out_data <= lane_y;
        end
    endgenerate

    always @(posedge clk) begin
        if (rst) begin
            s1_valid  <= 1'b0;
            out_valid <= 1'b0;
            wr_ptr    <= {(AW+1){1'b0}};
            rd_ptr    <= {(AW+1){1'b0}};
            phase     <= {GW{1'b0}};
        end else begin
            s1_valid <= in_valid && in_ready;
            if (s1_valid) wr_ptr <= wr_ptr + 1'b1;
            if (lane_done) rd_ptr <= rd_ptr + 1'b1;
            if (lane_step) phase <= lane_last ? {GW{1'b0}} : phase + 1'b1;
            out_valid <= lane_done || (out_valid && !out_ready);
        end
        if (in_valid && in_ready) s1_data <= in_data;
        if (s1_valid) fifo[wr_ptr[AW-1:0]] <= {res_data, s1_data};
    end
endmodule
