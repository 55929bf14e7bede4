// Calling a C function pointer with a run-time number of arguments, without libffi.
//
// Every argument is one register-sized word (uintptr_t). On the 64-bit ABIs tinygrad targets (System V x86-64,
// AArch64 AAPCS64) pointers and integers up to 64 bits travel in the same integer registers and, beyond those, in
// 8-byte stack slots, and a callee declared with `int n` reads the low 32 bits of its word. So calling
// `void f(float*, const float*, int)` through `void (*)(uintptr_t, uintptr_t, uintptr_t)` passes the same bits,
// provided integers are sign-extended into their words. Floating-point parameters are not supported (they travel
// in other registers), and neither is Apple's arm64 ABI for more than 8 arguments (it packs stack slots by size).
#pragma once

#include <cstddef>
#include <cstdint>

namespace tg::cpu {

using Word = std::uintptr_t;
using AnyFunction = void (*)();  // the generic function pointer type: GCC and Clang allow casts from it

inline constexpr size_t kMaxCallArgs = 64;

// Throws tg::RuntimeError naming the count if a function cannot be called with `nwords` arguments.
void check_call_arity(size_t nwords);

// Calls `fn(words[0], ..., words[nwords - 1])` and ignores any return value. Throws tg::RuntimeError naming the
// count if nwords > kMaxCallArgs (before calling anything).
void call_with_words(AnyFunction fn, const Word* words, size_t nwords);

// Reinterprets a symbol address (dlsym's void*) as a callable function pointer.
inline AnyFunction as_function(void* symbol) { return reinterpret_cast<AnyFunction>(symbol); }

}  // namespace tg::cpu
