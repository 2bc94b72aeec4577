// fp32_mul: IEEE-754 binary32 multiply, combinational, round to nearest even.
//
// Subnormal inputs and outputs are computed exactly (no flush to zero); overflow rounds
// to infinity; inf * 0 and any NaN input give a NaN. Every NaN produced is the canonical
// quiet NaN 0x7FC00000 (IEEE leaves the payload open; x86 would propagate an input's).
//
// Method: both significands (hidden bit made explicit, exponent 1 for subnormals) are
// multiplied exactly into 48 bits, normalized so the leading one sits in bit 47, shifted
// right into the subnormal range when the exponent is too small (the bits shifted out
// are kept as a sticky bit), and rounded once. The rounding increment is added to
// {exponent, fraction} together, so a carry out of the fraction bumps the exponent:
// 1.11..1 rounds up to 10.0 (and a subnormal to the smallest normal, and the largest
// finite exponent to infinity) without a separate case.
module fp32_mul (
    input  wire [31:0] a,
    input  wire [31:0] b,
    output wire [31:0] y
);
    localparam [31:0] QNAN = 32'h7FC00000;

    wire       a_sign = a[31];
    wire       b_sign = b[31];
    wire [7:0] a_exp  = a[30:23];
    wire [7:0] b_exp  = b[30:23];
    wire       sign   = a_sign ^ b_sign;

    wire a_zero = (a[30:0] == 31'd0);
    wire b_zero = (b[30:0] == 31'd0);
    wire a_inf  = (a_exp == 8'hFF) && (a[22:0] == 23'd0);
    wire b_inf  = (b_exp == 8'hFF) && (b[22:0] == 23'd0);
    wire a_nan  = (a_exp == 8'hFF) && (a[22:0] != 23'd0);
    wire b_nan  = (b_exp == 8'hFF) && (b[22:0] != 23'd0);

    // Significands with the hidden bit; a subnormal has exponent 1 and no hidden bit.
    wire [23:0] a_sig = {a_exp != 8'd0, a[22:0]};
    wire [23:0] b_sig = {b_exp != 8'd0, b[22:0]};
    wire [9:0]  a_e   = (a_exp == 8'd0) ? 10'd1 : {2'b00, a_exp};
    wire [9:0]  b_e   = (b_exp == 8'd0) ? 10'd1 : {2'b00, b_exp};

    wire [47:0] product = a_sig * b_sig;

    // Position of the leading one of the product (it is non-zero when used).
    function [5:0] leading_one(input [47:0] value);
        integer i;
        begin
            leading_one = 6'd0;
            for (i = 0; i < 48; i = i + 1)
                if (value[i]) leading_one = i[5:0];
        end
    endfunction

    wire [5:0]  lead       = leading_one(product);
    wire [47:0] normalized = product << (6'd47 - lead);
    // Biased exponent of 1.f * 2^e: lead + a_e + b_e - 127 - 46 (signed, 12 bits).
    wire signed [11:0] exp_pre = $signed({6'd0, lead}) + $signed({2'b00, a_e})
                               + $signed({2'b00, b_e}) - 12'sd173;

    // Below the normal range: shift right by 1 - exp_pre (at most 63, enough to leave
    // nothing but sticky bits) and store exponent 0.
    wire               tiny      = (exp_pre < 12'sd1);
    wire signed [11:0] under     = 12'sd1 - exp_pre;
    wire [5:0]         shift     = !tiny ? 6'd0 : (under > 12'sd63 ? 6'd63 : under[5:0]);
    // Bit 47 of the shifted value is the hidden bit: implied by the exponent field.
    /* verilator lint_off UNUSEDSIGNAL */
    wire [47:0]        shifted   = normalized >> shift;
    /* verilator lint_on UNUSEDSIGNAL */
    wire [47:0]        lost_mask = ~({48{1'b1}} << shift);
    wire               lost      = |(normalized & lost_mask);
    wire [7:0]         exp_field = tiny ? 8'd0 : exp_pre[7:0];

    // shifted[47:24] is the significand, [23] the guard bit, [22:0] and `lost` sticky.
    wire        guard     = shifted[23];
    wire        sticky    = (|shifted[22:0]) | lost;
    wire        round_up  = guard && (sticky || shifted[24]);
    wire [30:0] magnitude = {exp_field, shifted[46:24]} + {30'd0, round_up};
    wire        overflow  = !tiny && (exp_pre > 12'sd254);

    assign y = (a_nan || b_nan || (a_inf && b_zero) || (b_inf && a_zero)) ? QNAN
             : (a_inf || b_inf || overflow) ? {sign, 8'hFF, 23'd0}
             : (a_zero || b_zero)           ? {sign, 31'd0}
             : {sign, magnitude};
endmodule
