__device__ __forceinline__ double tg_exp2_f64(double x) {
  if (x != x) return x;
  if (x > 1024.0) return __builtin_inf();
  if (x < -1075.0) return 0.0;
  const double n = __builtin_rint(x);
  const double r = (x - n) * 0.6931471805599453094;
  double term = 1.0, sum = 1.0;
  for (int k = 1; k < 18; k++) { term *= r / k; sum += term; }
  return __builtin_ldexp(sum, (int)n);
}
__device__ __forceinline__ double tg_log2_f64(double x) {
  if (x != x || x < 0.0) return __builtin_nan("");
  if (x == 0.0) return -__builtin_inf();
  if (x == __builtin_inf()) return x;
  int e;
  double m = __builtin_frexp(x, &e);
  if (m < 0.70710678118654752440) { m *= 2.0; e -= 1; }
  const double t = (m - 1.0) / (m + 1.0), t2 = t * t;
  double term = t, sum = 0.0;
  for (int k = 1; k < 40; k += 2) { sum += term / k; term *= t2; }
  return e + 2.0 * sum * 1.4426950408889634074;
}
__device__ __forceinline__ double tg_sin_f64(double x) {
  if (x != x || x == __builtin_inf() || x == -__builtin_inf()) return __builtin_nan("");
  const double n = __builtin_rint(x * 0.15915494309189533577);
  const double r = (x - n * 6.28318530717958623200) - n * 2.44929359829470635445e-16;
  double term = r, sum = 0.0;
  for (int k = 1; k < 40; k += 2) { sum += term; term *= -r * r / ((k + 1) * (k + 2)); }
  return sum;
}
