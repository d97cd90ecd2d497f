/* What every build of decentopt's native kernels exports once, beside the kernels of
 * kernels.c (one set per instruction set): which updates they implement, in the
 * order of the `kind` argument, and which instruction set this CPU runs.
 */
#include <stdint.h>

#ifndef DECENTOPT_SOURCE_DIGEST
#define DECENTOPT_SOURCE_DIGEST "unknown"
#endif

/* The digest of the sources this library was built from (build.py's source_digest):
   an editable install whose sources changed since is not loaded. */
const char *decentopt_source_digest(void) { return DECENTOPT_SOURCE_DIGEST; }

/* The updates of decentopt_update_mix_*, by their `kind` index (kernels.c's enum). */
const char *decentopt_update_kinds(void) { return "descend momentum_descend correct edm"; }

/* 2: AVX-512F, 1: AVX2 with FMA, 0: neither (or not an x86 CPU). The compiler's
   CPU checks include whether the operating system saves the wide registers. */
int decentopt_cpu_level(void) {
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return 2;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 1;
#endif
    return 0;
}
