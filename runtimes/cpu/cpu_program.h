// tg::cpu::CpuProgram: one C function from a loaded Library, launched as a plain call.
#pragma once

#include <memory>
#include <string>

#include "call_thunks.h"
#include "cpu_library.h"
#include "runtime.h"

namespace tg::cpu {

class CpuProgram final : public Program {
 public:
  // Looks `name` up in `library` (throws tg::RuntimeError naming the symbol if missing) and keeps the library
  // loaded for as long as the program lives.
  CpuProgram(std::shared_ptr<Library> library, std::string name);

  const std::string& name() const noexcept override { return name_; }
  const std::string& device() const noexcept override;

  // Calls the function on the calling thread; it has finished when this returns. `dims` is ignored (rendered CPU
  // kernels loop themselves). Pointers pass as addresses, integers sign-extended to a word (see call_thunks.h).
  // Throws tg::RuntimeError naming the count for more than kMaxCallArgs arguments. Thread-safe as far as the
  // kernel itself is.
  void launch(const KernelArg* args, size_t nargs, const LaunchDims* dims) override;

  // The raw path graphs use: arguments already converted to words.
  void call(const Word* words, size_t nwords) const { call_with_words(fn_, words, nwords); }

  std::uintptr_t address() const noexcept { return reinterpret_cast<std::uintptr_t>(fn_); }

  // How a KernelArg travels to a C function.
  static Word to_word(const KernelArg& arg) noexcept {
    return arg.kind == KernelArg::Kind::Pointer ? static_cast<Word>(arg.as_pointer())
                                                : static_cast<Word>(static_cast<std::intptr_t>(arg.as_int()));
  }

 private:
  std::shared_ptr<Library> library_;
  std::string name_;
  AnyFunction fn_;
};

}  // namespace tg::cpu
