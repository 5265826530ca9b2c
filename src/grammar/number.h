// JSON numbers, unbounded and bounded. The decimal strings whose value lies within a bound form a
// regular language, built digit by digit as a comparison automaton (reading the integer part tracks its
// length and its lexicographic order against the bound's, the fraction part its order once the integer
// parts are equal) and intersected for the lower and upper bounds. Bounded numbers are written without
// an exponent and never as a negative zero. Digit counts are capped (see number.cpp) so that every value
// fits a double and a number cannot run on forever.
#pragma once
#include <optional>
#include <string>
#include <string_view>

#include "grammar/nfa.h"

namespace minfer::grammar {

// An exact decimal: int_digits without leading zeros ("0" for zero), frac_digits without trailing zeros.
struct Decimal {
    bool negative = false;  // never set for zero
    std::string int_digits = "0";
    std::string frac_digits;
};

// Parses a JSON number text exactly ("-1.25e2" is -125); nullopt if it is not one or its exponent is
// beyond +-400 (no double needs more).
std::optional<Decimal> parse_decimal(std::string_view text);
// -1, 0 or 1 as a < b, a == b, a > b.
int compare(const Decimal& a, const Decimal& b);

struct Bound {
    Decimal value;
    bool exclusive = false;
};

// Paths from -> to reading the JSON numbers (integer: integers only) allowed by the bounds.
void emit_number(Nfa& nfa, uint32_t from, uint32_t to, bool integer, const std::optional<Bound>& lower,
                 const std::optional<Bound>& upper);

}  // namespace minfer::grammar
