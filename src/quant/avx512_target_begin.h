// Compiles the functions that follow, up to avx512_target_end.h, for the AVX-512 level of the
// quantized kernels (F/BW/VL + VNNI, with AVX2/FMA/F16C), whatever -march says: they run only
// where quant_dot_dispatch.cpp's cpuid check chose that level. Include it after the system
// headers; no include guard, as each kernel file opens and closes the region once.
#if defined(__clang__)
#pragma clang attribute push(                                                      \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c"))), \
    apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")
// GCC 12 reports the deliberate self-initialisation of _mm512_undefined_* (inside the
// insert/extract and reduce intrinsics) as (maybe-)uninitialized.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
