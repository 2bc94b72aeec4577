// ws_requantize: one column's requantize in the epilogue (combinational), exactly the
// interpreter's (glensidec.lang.dtypes.requantize after the pre-shift):
//
//   p = x · mult                                      (X_W×32 signed, exact X_W+32-bit result, ws_mul)
//   q = post > 0 ? (p + 2^(post-1)) >>> post : p      (round half up)
//   y = clamp(clamp(q + zero_point, type range), low, high)
//
// computed as q = (t + 1) >>> 1 with t = (2p) >>> post: for post > 0 that is
// p >>> (post − 1), and adding 2^(post−1) before the shift only ever carries from that
// bit up; for post = 0, (2p + 1) >>> 1 = p. Only t's low SMALL_W bits are added: when t
// does not fit them, |q| ≥ 2^(OUT_W+1) and the result saturates by t's sign whatever
// the zero point, so no wide adder or comparator is needed after the product. X_W is the
// width of x: 32 for an accumulator, narrower where the epilogue knows x's range (the
// residual add's sum).
module ws_requantize #(
    parameter integer OUT_W = 8,     // signed output width (<= 32)
    parameter integer X_W   = 32     // signed width of x (<= 32)
) (
    input  wire [X_W-1:0]   x,           // signed, already shifted right by pre
    input  wire [31:0]      mult,        // signed
    input  wire [5:0]       post,
    input  wire [OUT_W-1:0] zero_point,  // signed
    input  wire [OUT_W-1:0] low,         // signed clip bounds
    input  wire [OUT_W-1:0] high,
    output wire [OUT_W-1:0] y
);
    localparam integer SMALL_W = OUT_W + 3;
    localparam [OUT_W-1:0] TYPE_MIN = {1'b1, {(OUT_W-1){1'b0}}};
    localparam [OUT_W-1:0] TYPE_MAX = {1'b0, {(OUT_W-1){1'b1}}};

    localparam integer P_W = X_W + 32;  // the exact product's width
    wire signed [P_W-1:0] product;
    // x recoded (Booth's b): a narrower x makes fewer partial-product rows
    ws_mul #(.A_W(32), .B_W(X_W)) u_product (.a(mult), .b(x), .y(product));
    wire signed [P_W:0] t = $signed({product, 1'b0}) >>> post;
    wire fits = (t[P_W:SMALL_W-1] == {(P_W+2-SMALL_W){t[P_W]}});
    wire signed [SMALL_W:0] t_small = {t[SMALL_W-1], t[SMALL_W-1:0]};
    wire signed [SMALL_W:0] one = {{SMALL_W{1'b0}}, 1'b1};
    wire signed [SMALL_W:0] q = (t_small + one) >>> 1;
    wire signed [SMALL_W:0] offset = q + $signed({{(SMALL_W+1-OUT_W){zero_point[OUT_W-1]}},
                                                  zero_point});
    wire signed [SMALL_W:0] type_min = {{(SMALL_W+1-OUT_W){1'b1}}, TYPE_MIN};
    wire signed [SMALL_W:0] type_max = {{(SMALL_W+1-OUT_W){1'b0}}, TYPE_MAX};
    wire signed [OUT_W-1:0] saturated = !fits ? (t[P_W] ? TYPE_MIN : TYPE_MAX)
                                      : (offset < type_min) ? TYPE_MIN
                                      : (offset > type_max) ? TYPE_MAX : offset[OUT_W-1:0];
    wire signed [OUT_W-1:0] low_s = low, high_s = high;
    assign y = (saturated < low_s) ? low_s : (saturated > high_s) ? high_s : saturated;
endmodule
