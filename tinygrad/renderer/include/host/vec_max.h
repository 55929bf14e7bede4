typedef ${mask_scalar} ${mask} __attribute__((vector_size(${bytes})));
static inline ${name} tg_max_${name}(${name} a, ${name} b) {
  ${mask} m = (a != a) | (a > b);
  return (${name})(((${mask})a & m) | ((${mask})b & ~m));
}
