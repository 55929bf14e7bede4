#include "call_thunks.h"

#include <array>
#include <string>
#include <utility>

#include "cpu_device.h"
#include "errors.h"

namespace tg::cpu {
namespace {

using Thunk = void (*)(AnyFunction, const Word*);

// Maps each index of a parameter pack to the type Word, to spell "N Words" as a function type.
template <size_t>
using WordAt = Word;

template <size_t... I>
void call_exact(AnyFunction fn, [[maybe_unused]] const Word* words, std::index_sequence<I...>) {
  using Exact = void (*)(WordAt<I>...);
  reinterpret_cast<Exact>(fn)(words[I]...);
}

// The thunk for exactly N arguments.
template <size_t N>
void call_n(AnyFunction fn, const Word* words) {
  call_exact(fn, words, std::make_index_sequence<N>{});
}

template <size_t... N>
constexpr std::array<Thunk, sizeof...(N)> make_table(std::index_sequence<N...>) {
  return {&call_n<N>...};
}

// table[n] calls a function with n word arguments; built at compile time, one entry per count 0..kMaxCallArgs.
constexpr std::array<Thunk, kMaxCallArgs + 1> kThunks = make_table(std::make_index_sequence<kMaxCallArgs + 1>{});

}  // namespace

void check_call_arity(size_t nwords) {
  if (nwords > kMaxCallArgs)
    throw RuntimeError(kDeviceName, "launch", "TOO_MANY_ARGUMENTS",
                       "a CPU kernel can take at most " + std::to_string(kMaxCallArgs) + " arguments, got " +
                           std::to_string(nwords));
}

void call_with_words(AnyFunction fn, const Word* words, size_t nwords) {
  check_call_arity(nwords);
  kThunks[nwords](fn, words);
}

}  // namespace tg::cpu
