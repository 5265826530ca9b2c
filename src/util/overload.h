// Overload{lambdas...}: one visitor out of several lambdas, for std::visit over the op/meta variants.
#pragma once

namespace minfer {

template <class... F>
struct Overload : F... {
    using F::operator()...;
};
template <class... F>
Overload(F...) -> Overload<F...>;

}  // namespace minfer
