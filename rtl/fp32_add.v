// fp32_add: IEEE-754 binary32 addition, combinational, round to nearest even.
//
// Subnormals are exact (no flush to zero); overflow rounds to infinity; inf + (-inf) and
// any NaN input give the canonical quiet NaN 0x7FC00000. An exact zero sum is +0 except
// (-0) + (-0) = -0, as IEEE specifies for round to nearest.
//
// Method: order the operands by magnitude (major, minor), align the smaller significand to
// the major one's exponent keeping three extra bits (guard, round and a sticky bit that ORs
// everything shifted further), add or subtract, renormalize (one right shift after a
// carry; left shifts after a cancellation, but never below exponent 1, which leaves a
// subnormal), and round once. Three extra bits are enough: a cancellation that needs a
// left shift of more than one happens only when the exponents differ by at most one,
// and then nothing was shifted past the guard bit. As in fp32_mul, the rounding
// increment is added to {exponent, fraction} so a carry bumps the exponent.
module fp32_add (
    input  wire [31:0] a,
    input  wire [31:0] b,
    output wire [31:0] y
);
    localparam [31:0] QNAN = 32'h7FC00000;

    wire a_inf = (a[30:23] == 8'hFF) && (a[22:0] == 23'd0);
    wire b_inf = (b[30:23] == 8'hFF) && (b[22:0] == 23'd0);
    wire a_nan = (a[30:23] == 8'hFF) && (a[22:0] != 23'd0);
    wire b_nan = (b[30:23] == 8'hFF) && (b[22:0] != 23'd0);
    wire both_zero = (a[30:0] == 31'd0) && (b[30:0] == 31'd0);

    // major has the larger magnitude (ties: a), so the result takes major's sign.
    wire        swap      = (b[30:0] > a[30:0]);
    wire [31:0] major     = swap ? b : a;
    wire [31:0] minor     = swap ? a : b;
    wire        subtract  = major[31] ^ minor[31];
    wire [7:0]  big_exp   = (major[30:23] == 8'd0) ? 8'd1 : major[30:23];
    wire [7:0]  small_exp = (minor[30:23] == 8'd0) ? 8'd1 : minor[30:23];
    wire [26:0] big_sig   = {major[30:23] != 8'd0, major[22:0], 3'b000};
    wire [26:0] small_sig = {minor[30:23] != 8'd0, minor[22:0], 3'b000};

    // Align: shift the smaller significand right, ORing the lost bits into bit 0.
    wire [7:0]  diff      = big_exp - small_exp;
    wire [4:0]  align     = (diff > 8'd27) ? 5'd27 : diff[4:0];
    wire [26:0] shifted   = small_sig >> align;
    wire        lost      = |(small_sig & ~({27{1'b1}} << align));
    wire [26:0] aligned   = {shifted[26:1], shifted[0] | lost};

    // 28 bits: bit 27 is the carry of an addition.
    wire [27:0] raw = subtract ? {1'b0, big_sig} - {1'b0, aligned}
                               : {1'b0, big_sig} + {1'b0, aligned};

    // After a carry: shift right once (keeping the sticky bit) and add one to the exponent.
    wire        carry    = raw[27];
    wire [26:0] sum      = carry ? {raw[27:2], raw[1] | raw[0]} : raw[26:0];
    wire [8:0]  sum_exp  = {1'b0, big_exp} + {8'd0, carry};

    // Leading zeros of sum above bit 0 (sum is non-zero when used).
    function [4:0] leading_zeros(input [26:0] value);
        integer i;
        begin
            leading_zeros = 5'd26;
            for (i = 0; i < 27; i = i + 1)
                if (value[i]) leading_zeros = 5'd26 - i[4:0];
        end
    endfunction

    // Renormalize, but not below exponent 1: what is left there is a subnormal.
    wire [4:0]  zeros      = leading_zeros(sum);
    wire [8:0]  room       = sum_exp - 9'd1;
    wire [4:0]  left       = ({4'd0, zeros} > room) ? room[4:0] : zeros;
    wire [26:0] norm       = sum << left;
    wire [8:0]  norm_exp   = sum_exp - {4'd0, left};
    wire [7:0]  exp_field  = norm[26] ? norm_exp[7:0] : 8'd0;

    // norm[26:3] is the significand, norm[2] the guard bit, norm[1:0] round and sticky.
    wire        round_up  = norm[2] && (norm[1] || norm[0] || norm[3]);
    wire [30:0] magnitude = {exp_field, norm[25:3]} + {30'd0, round_up};
    wire        overflow  = (norm_exp > 9'd254);

    assign y = (a_nan || b_nan || (a_inf && b_inf && (a[31] != b[31]))) ? QNAN
             : a_inf                  ? a
             : b_inf                  ? b
             : both_zero              ? {a[31] & b[31], 31'd0}
             : (raw == 28'd0)         ? 32'd0
             : overflow               ? {major[31], 8'hFF, 23'd0}
             : {major[31], magnitude};
endmodule
