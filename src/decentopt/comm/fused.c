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
#include <pthread.h>
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
