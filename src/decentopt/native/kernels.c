/* Elementwise updates fused with a circulant mix, for decentopt's simulator.
 *
 * decentopt_update_mix_<t>_<isa> computes, for every agent row i and column j of an
 * (n, d) state,
 *
 *     (y0, y1, ...) = update(inputs[i, j]),   out0[i, j] = sum_q w_q y0[(i + o_q) mod n, j],
 *
 * where update is one of the library's own, named in api.c (UPDATE_KINDS) in this
 * order: decentopt/comm/mixers/native.py maps each to the Python function it
 * implements, and the tests check both agree. y0 is never written to memory:
 * columns go in blocks, a block's y0 rows wait in a buffer that stays in cache,
 * and an output row is mixed as soon as the rows it reads exist.
 * decentopt_mix_<t>_<isa> is the plain mix, out = W z.
 *
 * This file is compiled once per instruction set (decentopt/native/build.py):
 * with -mavx512f, with -mavx2 -mfma and with the baseline flags, each with
 * DECENTOPT_ISA naming it, and the objects are linked into one library. Python
 * picks the variant the CPU supports at run time (decentopt_cpu_level in api.c),
 * so one built wheel is fast on every x86-64 CPU and correct on any other.
 *
 * What makes them fast (measured on a (256, 10^5) float32 state, see
 * benchmarks/bench_peers.py): every input of a row read in one loop, so the
 * memory streams run together; with AVX-512 or AVX2, outputs written by
 * non-temporal stores straight from registers (no output line is read first);
 * the ring's three-term sum unrolled (a loop over the terms cost more than the loads).
 *
 * The kernels for one element type are in kernels.h, CHOCO's compressed round in
 * compress.h, the logistic problem's gradient in logistic.h and the quadratic's in
 * quadratic.h, each included once for float and once for double.
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#ifndef DECENTOPT_ISA
#define DECENTOPT_ISA generic
#endif

/* The order of UPDATE_KINDS in api.c. */
enum { DESCEND = 0, MOMENTUM_DESCEND = 1, CORRECT = 2, EDM = 3 };
/* The operators of decentopt_choco (decentopt/comm/mixers/native.py: CHOCO_OPS). */
enum { TOP_K = 0, QSGD = 1, SIGN = 2 };
#define MAX_TERMS 64
#define MAX_WIDTH 8192
#define CAT_(a, b) a##_##b
#define CAT(a, b) CAT_(a, b)
/* An exported name: base, element type and instruction set, e.g. decentopt_mix_f32_avx2. */
#define EXPORT(name) CAT(CAT(name, SUFFIX), DECENTOPT_ISA)

static void fence(void) {
#if defined(__AVX512F__) || defined(__AVX2__)
    _mm_sfence(); /* non-temporal stores are visible to other threads after this */
#endif
}

/* dst[0:m) = src[0:m) by non-temporal stores where the CPU has them: a destination
   that is only written is not read into cache first (a scalar head up to its
   alignment, and a tail). Visible to other threads after fence(). */
static void stream_f64(double *restrict dst, const double *restrict src, int64_t m) {
    int64_t j = 0;
#if defined(__AVX512F__) || defined(__AVX2__)
    for (; j < m && ((uintptr_t)(dst + j) & 31); j++) dst[j] = src[j];
    for (; j + 4 <= m; j += 4) _mm256_stream_pd(dst + j, _mm256_loadu_pd(src + j));
#endif
    for (; j < m; j++) dst[j] = src[j];
}

static void stream_f32(float *restrict dst, const float *restrict src, int64_t m) {
    int64_t j = 0;
#if defined(__AVX512F__) || defined(__AVX2__)
    for (; j < m && ((uintptr_t)(dst + j) & 31); j++) dst[j] = src[j];
    for (; j + 8 <= m; j += 8) _mm256_stream_ps(dst + j, _mm256_loadu_ps(src + j));
#endif
    for (; j < m; j++) dst[j] = src[j];
}

/* Threads: started for each call and joined before it returns (no pool survives
   it, so a process forked later -- a sweep's workers -- inherits no threads; an
   OpenMP pool would hang such a child on its next parallel call). */
#define MAX_THREADS 256
typedef void (*task_fn)(const void *shared, int64_t first, int64_t last, void *scratch);

struct share {
    task_fn fn;
    const void *shared;
    int64_t first, last;
    size_t scratch;
    int failed;
};

static void *run_share(void *arg) {
    struct share *s = arg;
    void *scratch = s->scratch ? malloc(s->scratch) : NULL;
    if (s->scratch && scratch == NULL) {
        s->failed = 1;
    } else {
        s->fn(s->shared, s->first, s->last, scratch);
        fence();
    }
    free(scratch);
    return NULL;
}

/* fn over tasks [0, tasks) in contiguous shares, one per thread (the caller's
   thread takes the first); each thread gets `scratch` bytes of its own. 1 if a
   scratch buffer could not be allocated. */
static int run_parallel(task_fn fn, const void *shared, int64_t tasks, int threads,
                        size_t scratch) {
    if (tasks <= 0) return 0;
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    if (threads > tasks) threads = (int)tasks;
    if (threads < 1) threads = 1;
    struct share shares[MAX_THREADS];
    pthread_t ids[MAX_THREADS];
    int started[MAX_THREADS] = {0};
    for (int t = 0; t < threads; t++)
        shares[t] = (struct share){fn, shared, t * tasks / threads, (t + 1) * tasks / threads,
                                   scratch, 0};
    for (int t = 1; t < threads; t++)
        started[t] = pthread_create(&ids[t], NULL, run_share, &shares[t]) == 0;
    run_share(&shares[0]);
    int failed = shares[0].failed;
    for (int t = 1; t < threads; t++) {
        if (started[t])
            pthread_join(ids[t], NULL);
        else
            run_share(&shares[t]); /* no thread to be had: this one does it */
        failed |= shares[t].failed;
    }
    return failed;
}

#define T float
#define U uint32_t
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
#elif defined(__AVX2__)
#define VECTOR 1
#define LANES 8
#define V __m256
#define LOAD _mm256_loadu_ps
#define STOREU _mm256_storeu_ps
#define STREAM _mm256_stream_ps
#define SET _mm256_set1_ps
#define ADD _mm256_add_ps
#define SUB _mm256_sub_ps
#define MUL _mm256_mul_ps
#else
#define VECTOR 0
#endif
#include "kernels.h"
#include "compress.h"
#include "logistic.h"
#include "quadratic.h"
#undef T
#undef U
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
#define U uint64_t
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
#elif defined(__AVX2__)
#define LANES 4
#define V __m256d
#define LOAD _mm256_loadu_pd
#define STOREU _mm256_storeu_pd
#define STREAM _mm256_stream_pd
#define SET _mm256_set1_pd
#define ADD _mm256_add_pd
#define SUB _mm256_sub_pd
#define MUL _mm256_mul_pd
#endif
#include "kernels.h"
#include "compress.h"
#include "logistic.h"
#include "quadratic.h"
