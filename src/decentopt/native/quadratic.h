/* The quadratic problem's gradient for element type T (names end in SUFFIX), included by
 * kernels.c after logistic.h.
 *
 * decentopt_quadratic_gradient_<t>_<isa> takes count Hessians H (count, d, d), points
 * x (count, d), b (count, d) and the noise terms (count, d) (NULL: none), and computes
 *
 *     out_c = (H_c x_c - b_c) + term_c,
 *
 * decentopt.problems.Quadratic's stochastic gradient given its noise (the block path's
 * gradient_from): H read once, row by row. torch's elementwise product and sum wrote and
 * read back a (count, d, d) temporary (at d = 100, 2.5 ms against 0.5-1 ms here), and its
 * batched matrix-vector product was slower still.
 *
 * Each product H_c[i] . x_c is summed in double in eight partial sums (coordinates j
 * mod 8), added as ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)), then the last
 * d mod 8 coordinates in order; b subtracted in double, the result rounded to T once, the
 * term added in T. Each matrix is one thread's and kernels.c is compiled without
 * contraction: the numbers depend on neither the thread count nor the instruction set.
 */
#define QFN(name) CAT(name, SUFFIX)

struct QFN(quadratic_job) {
    int64_t d;
    const T *H, *x, *b, *term;
    T *out;
};

static void QFN(quadratic_rows)(const void *shared, int64_t first, int64_t last,
                                void *scratch) {
    (void)scratch;
    const struct QFN(quadratic_job) *job = shared;
    const int64_t d = job->d, whole = d / 8 * 8;
    for (int64_t c = first; c < last; c++) {
        const T *restrict x = job->x + c * d;
        for (int64_t i = 0; i < d; i++) {
            const T *restrict h = job->H + (c * d + i) * d;
            double lane[8] = {0};
            for (int64_t j = 0; j < whole; j += 8)
                for (int l = 0; l < 8; l++) lane[l] += (double)h[j + l] * (double)x[j + l];
            double acc = ((lane[0] + lane[1]) + (lane[2] + lane[3])) +
                         ((lane[4] + lane[5]) + (lane[6] + lane[7]));
            for (int64_t j = whole; j < d; j++) acc += (double)h[j] * (double)x[j];
            T g = (T)(acc - (double)job->b[c * d + i]);
            if (job->term != NULL) g += job->term[c * d + i];
            job->out[c * d + i] = g;
        }
    }
}

int EXPORT(decentopt_quadratic_gradient)(int64_t count, int64_t d, const T *H, const T *x,
                                         const T *b, const T *term, T *out, int threads) {
    if (count < 0 || d < 0) return 1;
    const struct QFN(quadratic_job) job = {d, H, x, b, term, out};
    /* a thread per 2^18 entries of H at most: below, starting one costs more than it does */
    const int64_t most = count * d * d / 262144 + 1;
    return d == 0 ? 0 : run_parallel(QFN(quadratic_rows), &job, count,
                                     most < threads ? (int)most : threads, 0);
}

#undef QFN
