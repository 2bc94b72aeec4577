// ws_mul: the exact product of a signed A_W-bit a and a signed B_W-bit b (A_W + B_W bits),
// combinational, as radix-4 Booth partial products: b is recoded into ceil(B_W/2) digits
// d_i = -2·b[2i+1] + b[2i] + b[2i-1] in {-2..2} (b[-1] = 0), and the product is
// Σ d_i·a·4^i. Recoding the narrower operand makes fewer rows (ws_requantize recodes its
// x, 24 bits wide in the residual add's requantize, not the 32-bit multiplier).
//
// Each digit's row d_i·a is a (A_W+1)-bit signed value built as (a or 2a or 0) XOR neg,
// plus neg at its lowest bit (−v = ~v + 1). Its sign extension is not added bit by bit: a
// W-bit signed v equals (v with its sign bit inverted, unsigned) − 2^(W−1), so every row
// is added unsigned with its sign bit inverted and the −2^(W−1+2i) of all rows is one
// constant. Half as many rows as a plain array product of b's bits, each a little dearer:
// Yosys's techmap builds a 32×32 product in 5,139 gates this way against 7,171 from `*`
// (bench/results/synth.md).
//
// Y_W < A_W + B_W keeps only the product's low Y_W bits (the product mod 2^Y_W, as an i32
// wrap needs): every sum is then Y_W bits wide and the rows' bits above it are never built.
// Synthesized per module (bench_synth.py's area script), unused high bits of a full product
// would stay: a 32×16 product's low 32 bits cost 1,723 cells this way against 2,495.
// Booth recodes b: the narrower operand as b makes fewer rows (ceil(B_W/2) of them).
module ws_mul #(
    parameter integer A_W = 32,
    parameter integer B_W = 32,
    parameter integer Y_W = A_W + B_W   // the product's low bits kept (<= A_W + B_W)
) (
    input  wire [A_W-1:0]     a,
    input  wire [B_W-1:0]     b,
    output wire [Y_W-1:0]     y
);
    localparam integer B_EVEN = B_W + B_W % 2;  // b sign-extended to whole digits
    localparam integer DIGITS = B_EVEN / 2;
    localparam integer W      = A_W + 1;         // one row: d·a, |d| <= 2
    localparam integer FULL_W = A_W + B_EVEN;    // the whole product fits A_W + B_W
    localparam integer S_W    = (Y_W < A_W + B_W) ? Y_W : FULL_W;  // the sums (mod 2^S_W)
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
            // a or 2a chosen, zeroed for d_i = 0, inverted for a negative digit: a
            // multiplexer, an AND and an XOR a bit (two ANDs and an OR chose it before)
            wire [W-1:0] row = ((two ? a_twice : a_once) & {W{one | two}}) ^ {W{neg}};
            // the row at 4^i with its sign bit inverted (it ends at bit FULL_W − 2 at most),
            // and its negation's +1
            /* verilator lint_off UNUSEDSIGNAL */  // bits at and above S_W when truncated
            wire [FULL_W-1:0] placed_full = {{(FULL_W-W){1'b0}}, ~row[W-1], row[W-2:0]}
                                            << (2 * i);
            /* verilator lint_on UNUSEDSIGNAL */
            wire [S_W-1:0] placed = placed_full[S_W-1:0];
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
    assign y = product_all[Y_W-1:0];
endmodule
