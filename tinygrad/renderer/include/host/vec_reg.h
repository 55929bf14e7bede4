static inline ${name} tg_reg_${name}(${name} v) {
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
  __asm__("" : "+v"(v));
#elif defined(__GNUC__) && !defined(__clang__) && defined(__aarch64__)
  __asm__("" : "+w"(v));
#endif
  return v;
}
