/* Elementwise updates fused with a circulant mix, for decentopt's simulator.
 *
 * decentopt_update_mix_<t> computes, for every agent row i and column j of an
 * (n, d) state,
 *
 *     (y0, y1, ...) = update(inputs[i, j]),   out0[i, j] = sum_q w_q y0[(i + o_q) mod n, j],
 *
 * where update is one of the library's own (decentopt/comm/native.py registers
 * each with the Python function it implements; tests check both agree). y0 is
 * never written to memory: columns go in blocks, a block's y0 rows wait in a
 * buffer that stays in cache, and an output row is mixed as soon as the rows it
 * reads exist. decentopt_mix_<t> is the plain mix, out = W z.
 *
 * What makes them fast (measured on a (256, 10^5) float32 state, see
 * benchmarks/bench_peers.py): every input of a row read in one loop, so the
 * memory streams run together; with AVX-512, outputs written by non-temporal
 * stores straight from registers (no output line is read first); the ring's
 * three-term sum unrolled (a loop over the terms cost more than the loads).
 *
 * The kernels for one element type are in fused_kernels.h, included once for
 * float and once for double.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

enum { DESCEND = 0, MOMENTUM_DESCEND = 1, CORRECT = 2, EDM = 3 };
#define MAX_TERMS 64
#define MAX_WIDTH 8192
#define CAT_(a, b) a##_##b
#define CAT(a, b) CAT_(a, b)

static void fence(void) {
#if defined(__AVX512F__)
    _mm_sfence(); /* non-temporal stores are visible to other threads after this */
#endif
}

#define T float
#define SUFFIX f32
#if defined(__AVX512F__)
#define VECTOR 1
#define LANES 16
#define V __m512
#define LOAD _mm512_loadu_ps
#define STOREU _mm512_storeu_ps
#define STREAM _mm512_stream_ps
#define SET _mm512_set1_ps
#define ADD _mm512_add_ps
#define SUB _mm512_sub_ps
#define MUL _mm512_mul_ps
#else
#define VECTOR 0
#endif
#include "fused_kernels.h"
#undef T
#undef SUFFIX
#undef LANES
#undef V
#undef LOAD
#undef STOREU
#undef STREAM
#undef SET
#undef ADD
#undef SUB
#undef MUL

#define T double
#define SUFFIX f64
#if defined(__AVX512F__)
#define LANES 8
#define V __m512d
#define LOAD _mm512_loadu_pd
#define STOREU _mm512_storeu_pd
#define STREAM _mm512_stream_pd
#define SET _mm512_set1_pd
#define ADD _mm512_add_pd
#define SUB _mm512_sub_pd
#define MUL _mm512_mul_pd
#endif
#include "fused_kernels.h"
