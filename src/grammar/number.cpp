// Decimal parsing and the bounded-number automata; see number.h.
#include "grammar/number.h"

#include <algorithm>
#include <array>
#include <map>
#include <tuple>
#include <vector>

namespace minfer::grammar {

std::optional<Decimal> parse_decimal(std::string_view t) {
    size_t i = 0;
    Decimal d;
    const bool negative = i < t.size() && t[i] == '-';
    if (negative) ++i;
    std::string digits;
    long point = 0;
    for (; i < t.size() && t[i] >= '0' && t[i] <= '9'; ++i) digits += t[i], ++point;
    if (digits.empty()) return std::nullopt;
    if (i < t.size() && t[i] == '.')
        for (++i; i < t.size() && t[i] >= '0' && t[i] <= '9'; ++i) digits += t[i];
    long exp = 0;
    if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
        ++i;
        const bool neg_exp = i < t.size() && t[i] == '-';
        if (i < t.size() && (t[i] == '-' || t[i] == '+')) ++i;
        if (i == t.size()) return std::nullopt;
        for (; i < t.size() && t[i] >= '0' && t[i] <= '9'; ++i) {
            exp = exp * 10 + (t[i] - '0');
            if (exp > 400) return std::nullopt;
        }
        if (neg_exp) exp = -exp;
    }
    if (i != t.size()) return std::nullopt;
    point += exp;  // the value is 0.digits * 10^point
    if (point < 0) digits.insert(0, static_cast<size_t>(-point), '0'), point = 0;
    if (point > static_cast<long>(digits.size())) digits.append(point - digits.size(), '0');
    d.int_digits = digits.substr(0, point);
    d.frac_digits = digits.substr(point);
    d.int_digits.erase(0, d.int_digits.find_first_not_of('0'));
    if (d.int_digits.empty()) d.int_digits.push_back('0');
    d.frac_digits.erase(d.frac_digits.find_last_not_of('0') + 1);
    d.negative = negative && (d.int_digits != "0" || !d.frac_digits.empty());
    return d;
}

namespace {

int compare_magnitude(const Decimal& a, const Decimal& b) {
    if (a.int_digits.size() != b.int_digits.size()) return a.int_digits.size() < b.int_digits.size() ? -1 : 1;
    if (const int c = a.int_digits.compare(b.int_digits); c != 0) return c < 0 ? -1 : 1;
    const int c = a.frac_digits.compare(b.frac_digits);
    return c < 0 ? -1 : c > 0 ? 1 : 0;
}

// ---- comparison automata over magnitudes: digits 0-9 are symbols 0-9, '.' is symbol 10 ----------------

constexpr int kDot = 10;
constexpr int kIntDigits = 16, kFracDigits = 16, kIntegerDigits = 19;
enum Rel : int { kLt = 1, kEq = 2, kGt = 4 };  // bits of the outcomes an automaton accepts

struct DigitDfa {
    std::vector<std::array<int32_t, 11>> next;  // -1: rejected
    std::vector<bool> accept;
};

// One state of the comparison of a magnitude being read against the bound.
enum class Phase { kStart, kZero, kInt, kLong, kFracFixed, kFracEq };
using Key = std::tuple<Phase, int, int, bool>;  // phase, digits read (or Rel), Rel, a fraction digit read

class Comparison {
  public:
    Comparison(const Decimal& bound, int accepted, bool integer)
        : b_(bound), accepted_(accepted), integer_(integer) {}

    DigitDfa build() {
        DigitDfa dfa;
        std::map<Key, int32_t> ids;
        std::vector<Key> keys = {{Phase::kStart, 0, 0, false}};
        ids[keys[0]] = 0;
        for (size_t i = 0; i < keys.size(); ++i) {
            const Key k = keys[i];
            dfa.next.emplace_back();
            dfa.accept.push_back((outcome(k) & accepted_) != 0);
            for (int sym = 0; sym <= kDot; ++sym) {
                const std::optional<Key> t = step(k, sym);
                if (!t) {
                    dfa.next[i][sym] = -1;
                    continue;
                }
                auto [it, fresh] = ids.try_emplace(*t, static_cast<int32_t>(keys.size()));
                if (fresh) keys.push_back(*t);
                dfa.next[i][sym] = it->second;
            }
        }
        return dfa;
    }

  private:
    int cmp_digit(int d, size_t k) const {
        const int b = b_.int_digits[k] - '0';
        return d < b ? kLt : d > b ? kGt : kEq;
    }
    bool bound_is_fraction() const { return b_.int_digits == "0"; }
    int int_rel(const Key& k) const {
        const auto [phase, n, rel, have] = k;
        const int len = static_cast<int>(b_.int_digits.size());
        if (phase == Phase::kZero) return bound_is_fraction() ? kEq : kLt;
        if (phase == Phase::kLong) return kGt;
        return n < len ? kLt : rel;
    }
    Key after_int(int rel) const {
        return rel == kEq ? Key{Phase::kFracEq, 0, 0, false} : Key{Phase::kFracFixed, rel, 0, false};
    }

    std::optional<Key> step(const Key& k, int sym) const {
        const auto [phase, n, rel, have] = k;
        const int len = static_cast<int>(b_.int_digits.size());
        const bool in_int = phase == Phase::kZero || phase == Phase::kInt || phase == Phase::kLong;
        if (sym == kDot) {
            if (integer_ || !in_int) return std::nullopt;
            return after_int(int_rel(k));
        }
        switch (phase) {
            case Phase::kStart:
                if (sym == 0) return Key{Phase::kZero, 1, 0, false};
                if (bound_is_fraction()) return Key{Phase::kLong, 0, 0, false};
                return Key{Phase::kInt, 1, cmp_digit(sym, 0), false};
            case Phase::kZero:
                return std::nullopt;
            case Phase::kInt:
                if (n == len) return Key{Phase::kLong, 0, 0, false};
                return Key{Phase::kInt, n + 1, rel == kEq ? cmp_digit(sym, n) : rel, false};
            case Phase::kLong:
                return k;
            case Phase::kFracFixed:
                return Key{Phase::kFracFixed, n, 0, true};
            case Phase::kFracEq: {
                const int flen = static_cast<int>(b_.frac_digits.size());
                const int t = n < flen ? b_.frac_digits[n] - '0' : 0;
                if (sym != t) return Key{Phase::kFracFixed, sym < t ? kLt : kGt, 0, true};
                return Key{Phase::kFracEq, std::min(n + 1, flen), 0, true};
            }
        }
        return std::nullopt;
    }

    // The outcome if the magnitude ends here, 0 if it cannot end here.
    int outcome(const Key& k) const {
        const auto [phase, n, rel, have] = k;
        switch (phase) {
            case Phase::kStart:
                return 0;
            case Phase::kZero:
            case Phase::kInt:
            case Phase::kLong: {
                const int r = int_rel(k);
                return r == kEq && !b_.frac_digits.empty() ? kLt : r;
            }
            case Phase::kFracFixed:
                return have ? n : 0;
            case Phase::kFracEq:
                if (!have) return 0;
                return n < static_cast<int>(b_.frac_digits.size()) ? kLt : kEq;
        }
        return 0;
    }

    const Decimal& b_;
    int accepted_;
    bool integer_;
};

DigitDfa comparison(const Decimal& bound, int accepted, bool integer) {
    return Comparison(bound, accepted, integer).build();
}

DigitDfa intersect(const DigitDfa& a, const DigitDfa& b) {
    DigitDfa out;
    std::map<std::pair<int32_t, int32_t>, int32_t> ids = {{{0, 0}, 0}};
    std::vector<std::pair<int32_t, int32_t>> pairs = {{0, 0}};
    for (size_t i = 0; i < pairs.size(); ++i) {
        const auto [x, y] = pairs[i];
        out.next.emplace_back();
        out.accept.push_back(a.accept[x] && b.accept[y]);
        for (int sym = 0; sym <= kDot; ++sym) {
            const int32_t tx = a.next[x][sym], ty = b.next[y][sym];
            if (tx < 0 || ty < 0) {
                out.next[i][sym] = -1;
                continue;
            }
            auto [it, fresh] = ids.try_emplace({tx, ty}, static_cast<int32_t>(pairs.size()));
            if (fresh) pairs.emplace_back(tx, ty);
            out.next[i][sym] = it->second;
        }
    }
    return out;
}

void emit_dfa(const DigitDfa& dfa, Nfa& nfa, uint32_t from, uint32_t to) {
    std::vector<uint32_t> node(dfa.next.size());
    node[0] = from;
    for (size_t s = 1; s < node.size(); ++s) node[s] = nfa.node();
    for (size_t s = 0; s < node.size(); ++s) {
        if (dfa.accept[s]) nfa.eps(node[s], to);
        for (int sym = 0; sym <= kDot; ++sym) {
            const int32_t t = dfa.next[s][sym];
            if (t < 0) continue;
            const uint8_t byte = sym == kDot ? '.' : static_cast<uint8_t>('0' + sym);
            nfa.bytes(node[s], byte, byte, node[t]);
        }
    }
}

// Magnitudes of at most max_int integer digits and max_frac fraction digits (integer: none).
DigitDfa shape(int max_int, int max_frac, bool integer) {
    // States: 0 start, 1 "0", 2..max_int+1 digits read, then the dot, then 1..max_frac fraction digits.
    const int dot = max_int + 2, frac = dot + 1, n = frac + max_frac;
    DigitDfa d;
    d.next.assign(n, {});
    d.accept.assign(n, false);
    for (auto& row : d.next) row.fill(-1);
    for (int sym = 1; sym <= 9; ++sym) d.next[0][sym] = 2;
    d.next[0][0] = 1;
    for (int s = 1; s < dot; ++s) {
        d.accept[s] = true;
        if (s >= 2 && s < max_int + 1)
            for (int sym = 0; sym <= 9; ++sym) d.next[s][sym] = s + 1;
        if (!integer) d.next[s][kDot] = dot;
    }
    for (int s = dot; s < n; ++s) {
        d.accept[s] = s > dot;
        if (s + 1 < n)
            for (int sym = 0; sym <= 9; ++sym) d.next[s][sym] = s + 1;
    }
    return d;
}

// JSON numbers with at most kIntDigits integer digits, kFracDigits fraction digits and a two-digit
// exponent, and integers of at most 19 digits without a negative zero: every value fits a double (a
// parser never overflows) and no number runs on forever.
void emit_unbounded(Nfa& nfa, uint32_t from, uint32_t to, bool integer) {
    if (integer) {
        const uint32_t negative = nfa.node();
        const DigitDfa digits = shape(kIntegerDigits, 0, true);
        nfa.bytes(from, '-', '-', negative);
        emit_dfa(digits, nfa, from, to);
        return emit_dfa(intersect(digits, comparison(Decimal(), kGt, true)), nfa, negative, to);
    }
    const uint32_t magnitude = nfa.node(), end = nfa.node();
    nfa.eps(from, magnitude);
    nfa.bytes(from, '-', '-', magnitude);
    emit_dfa(shape(kIntDigits, kFracDigits, false), nfa, magnitude, end);
    const uint32_t e = nfa.node(), e_sign = nfa.node(), e_digit = nfa.node();
    nfa.eps(end, to);
    nfa.bytes(end, 'e', 'e', e);
    nfa.bytes(end, 'E', 'E', e);
    nfa.eps(e, e_sign);
    nfa.bytes(e, '+', '+', e_sign);
    nfa.bytes(e, '-', '-', e_sign);
    nfa.bytes(e_sign, '0', '9', e_digit);
    nfa.bytes(e_digit, '0', '9', to);
    nfa.eps(e_digit, to);
}

Decimal magnitude(Decimal d) {
    d.negative = false;
    return d;
}

}  // namespace

int compare(const Decimal& a, const Decimal& b) {
    if (a.negative != b.negative) return a.negative ? -1 : 1;
    const int m = compare_magnitude(a, b);
    return a.negative ? -m : m;
}

void emit_number(Nfa& nfa, uint32_t from, uint32_t to, bool integer, const std::optional<Bound>& lower,
                 const std::optional<Bound>& upper) {
    if (!lower && !upper) return emit_unbounded(nfa, from, to, integer);
    // As many digits as the bounds need, and kFracDigits more fraction digits than theirs: enough to
    // write a value strictly between any two distinct bounds.
    size_t max_int = integer ? kIntegerDigits : kIntDigits, max_frac = 0;
    for (const std::optional<Bound>& b : {lower, upper})
        if (b)
            max_int = std::max(max_int, b->value.int_digits.size()),
            max_frac = std::max(max_frac, b->value.frac_digits.size());
    const DigitDfa digits =
        shape(static_cast<int>(max_int), static_cast<int>(max_frac) + kFracDigits, integer);
    const Decimal zero;
    // X >= 0: X >= lower holds when lower < 0; X <= upper fails when upper < 0.
    if (!upper || !upper->value.negative) {
        DigitDfa dfa = intersect(digits, comparison(zero, kEq | kGt, integer));
        if (lower && !lower->value.negative)
            dfa = intersect(dfa, comparison(lower->value, lower->exclusive ? kGt : kEq | kGt, integer));
        if (upper)
            dfa = intersect(dfa, comparison(upper->value, upper->exclusive ? kLt : kLt | kEq, integer));
        emit_dfa(dfa, nfa, from, to);
    }
    // X = -M with M > 0: X >= lower fails when lower >= 0; X <= upper holds when upper >= 0.
    if (!lower || lower->value.negative) {
        DigitDfa dfa = intersect(digits, comparison(zero, kGt, integer));
        if (lower)
            dfa = intersect(dfa,
                            comparison(magnitude(lower->value), lower->exclusive ? kLt : kLt | kEq, integer));
        if (upper && upper->value.negative)
            dfa = intersect(dfa,
                            comparison(magnitude(upper->value), upper->exclusive ? kGt : kEq | kGt, integer));
        const uint32_t minus = nfa.node();
        nfa.bytes(from, '-', '-', minus);
        emit_dfa(dfa, nfa, minus, to);
    }
}

}  // namespace minfer::grammar
