// ws_mul: the exact product of a signed A_W-bit a and a signed B_W-bit b (A_W + B_W bits),
// combinational, as radix-4 Booth partial products: b is recoded into ceil(B_W/2) digits
// d_i = -2·b[2i+1] + b[2i] + b[2i-1] in {-2..2} (b[-1] = 0), and the product is
// Σ d_i·a·4^i. The epilogue's multipliers are per layer (b, stable while rows flow) and its
// data per row (a).
//
// Each digit's row d_i·a is a (A_W+1)-bit signed value built as (a or 2a or 0) XOR neg,
// plus neg at its lowest bit (−v = ~v + 1). Its sign extension is not added bit by bit: a
// W-bit signed v equals (v with its sign bit inverted, unsigned) − 2^(W−1), so every row
// is added unsigned with its sign bit inverted and the −2^(W−1+2i) of all rows is one
// constant. Half as many rows as a plain array product of b's bits, each a little dearer:
// Yosys's techmap builds a 32×32 product in 5,139 gates this way against 7,171 from `*`
// (bench/results/synth.md).
module ws_mul #(
    parameter integer A_W = 32,
    parameter integer B_W = 32
) (
    input  wire [A_W-1:0]     a,
    input  wire [B_W-1:0]     b,
    output wire [A_W+B_W-1:0] y
);
    localparam integer B_EVEN = B_W + B_W % 2;  // b sign-extended to whole digits
    localparam integer DIGITS = B_EVEN / 2;
    localparam integer W      = A_W + 1;         // one row: d·a, |d| <= 2
    localparam integer S_W    = A_W + B_EVEN;    // the sums (the product fits A_W + B_W)
    localparam [S_W-1:0] ONE  = {{(S_W-1){1'b0}}, 1'b1};

    // −Σ 2^(W−1+2i): the rows' inverted sign bits, corrected at once
    function automatic [S_W-1:0] sign_correction(input integer digits);
        integer i;
        begin
            sign_correction = {S_W{1'b0}};
            for (i = 0; i < digits; i = i + 1)
                sign_correction = sign_correction - (ONE << (W - 1 + 2 * i));
        end
    endfunction
    localparam [S_W-1:0] SIGN_CORRECTION = sign_correction(DIGITS);

    wire [W-1:0]    a_once  = {a[A_W-1], a};
    wire [W-1:0]    a_twice = {a, 1'b0};
    wire [B_EVEN:0] digits  = {{(B_EVEN-B_W){b[B_W-1]}}, b, 1'b0};
    genvar i;
    generate
        for (i = 0; i < DIGITS; i = i + 1) begin : g_digit
            wire [2:0]   d   = digits[2*i +: 3];
            wire         one = d[0] ^ d[1];                     // |d_i| = 1
            wire         two = (d == 3'b011) || (d == 3'b100);  // |d_i| = 2
            wire         neg = d[2];
            wire [W-1:0] row = (({W{one}} & a_once) | ({W{two}} & a_twice)) ^ {W{neg}};
            // the row at 4^i with its sign bit inverted (it ends at bit S_W − 2 at most),
            // and its negation's +1
            wire [S_W-1:0] placed = {{(S_W-W){1'b0}}, ~row[W-1], row[W-2:0]} << (2 * i);
            wire [S_W-1:0] carry  = {{(S_W-1){1'b0}}, neg} << (2 * i);
            // the running sum (one wire per digit: an array of them reads to Verilator as
            // a combinational loop)
            wire [S_W-1:0] sum;
            if (i == 0) begin : g_first
                assign sum = SIGN_CORRECTION + placed + carry;
            end else begin : g_next
                assign sum = g_digit[i-1].sum + placed + carry;
            end
        end
    endgenerate
    wire [S_W-1:0] product = g_digit[DIGITS-1].sum;
    /* verilator lint_off UNUSEDSIGNAL */  // bits above A_W + B_W (b's sign extension)
    wire [S_W-1:0] product_all = product;
    /* verilator lint_on UNUSEDSIGNAL */
    assign y = product_all[A_W+B_W-1:0];
endmodule
