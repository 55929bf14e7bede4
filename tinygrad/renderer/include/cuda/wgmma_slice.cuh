template <bool BK, int ATOMS, int WAIT> __device__ __forceinline__ tg_vec<float, ${regs}> tg_${name}_n${n}(
    const unsigned short* a, const unsigned short* b, tg_vec<float, ${regs}> c) {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
  for (int i = 0; i < ${regs}; i++) asm volatile("" : "+f"(c.e[i]) :: "memory");
  unsigned long long da = tg_wgmma_desc(a, 16, 1024), db = tg_wgmma_desc(b, BK ? 16 : ATOMS, 1024);
#pragma unroll
  for (int s = 0; s < 4; s++) {
    unsigned long long das = da + 2 * s, dbs = db + (BK ? 2 * s : 128 * s);
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %${pred}, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n${n}k16.f32.${ty}.${ty} {${outs}}, %${desc_a}, %${desc_b}, p, 1, 1, 0, %${trans_b};\n}\n"
      : ${operands}
      : "l"(das), "l"(dbs), "r"(1), "n"(BK ? 0 : 1));
  }
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(WAIT) : "memory");
#pragma unroll
  for (int i = 0; i < ${regs}; i++) asm volatile("" : "+f"(c.e[i]) :: "memory");
  return c;
}
