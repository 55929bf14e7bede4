static inline ${name} tg_sel_${name}(${mask} m, ${name} a, ${name} b) {
  return (${name})(((${mask})a & m) | ((${mask})b & ~m));
}
static inline ${name} tg_exp2_${name}(${name} x) {
  ${name} c = tg_sel_${name}(x > ${hi}, ${hi}, x);
  c = tg_sel_${name}(c < ${lo}, ${lo}, c);
  ${name} t = c + ${half};
  ${mask} i = __builtin_convertvector(t, ${mask});
  i = i + (t < __builtin_convertvector(i, ${name}));  /* truncation to floor: true is -1 */
  ${name} f = c - __builtin_convertvector(i, ${name});
  ${mask} h = i >> 1, bias = i - i + 127;
  ${name} r = ${poly} * (${name})((h + bias) << 23) * (${name})((i - h + bias) << 23);
  return tg_sel_${name}(x != x, x, r);
}
