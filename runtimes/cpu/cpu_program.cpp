#include "cpu_program.h"

#include <array>

#include "cpu_device.h"

namespace tg::cpu {

CpuProgram::CpuProgram(std::shared_ptr<Library> library, std::string name)
    : library_(std::move(library)), name_(std::move(name)), fn_(as_function(library_->symbol(name_))) {}

const std::string& CpuProgram::device() const noexcept {
  static const std::string name = kDeviceName;
  return name;
}

void CpuProgram::launch(const KernelArg* args, size_t nargs, const LaunchDims* /*dims*/) {
  // Words live on the stack: no allocation on the launch path. Oversized counts are rejected by call_with_words
  // before the array is read, but must not overflow it while filling.
  std::array<Word, kMaxCallArgs> words;
  size_t n = nargs <= kMaxCallArgs ? nargs : 0;
  for (size_t i = 0; i < n; ++i) words[i] = to_word(args[i]);
  call_with_words(fn_, words.data(), nargs);
}

}  // namespace tg::cpu
