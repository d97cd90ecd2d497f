/* The logistic problem's full local gradient for element type T (names end in SUFFIX),
 * included by kernels.c after compress.h.
 *
 * decentopt_logistic_gradient_<t>_<isa> takes samples u (groups, m, d), labels v
 * (rows, m) of +-1 (or none: all +1), points x (rows, d) and a scale, where each group's
 * samples serve `levels` rows (row (g / stride) * stride * levels + l * stride + g % stride
 * for level l: decentopt.problems.Logistic's heterogeneity levels share their samples and
 * differ in labels), and computes for every row r of group g, with a_rj = v_rj u_gj,
 *
 *     z_j = a_rj . x_r,   w_j = scale * sigmoid(-z_j) = scale / (1 + e^{z_j}),
 *     out_r = sum_j w_j a_rj                                   (j = 1 .. m),
 *
 * which with scale = -1/m is the data term of decentopt.problems.Logistic's gradient;
 * given loss (else NULL), also each row's loss_r = sum_j log(1 + e^{-z_j}) in the same pass
 * (the objective's data term at the same points: the metrics' gradient and objective at
 * the agents' mean read the data once), in four partial sums (samples j mod 4) added as
 * (l0 + l1) + (l2 + l3).
 * It reads the data once: a block of BLOCK samples (BLOCK d elements, in the first-level
 * cache) gives, for each of its group's rows in turn, its margins, then its weights,
 * then its terms of the sum before the next block is read (torch's two batched products
 * read all the data twice, and once per level). Since v = +-1, z_j = v_rj (u_gj . x_r)
 * and w_j a_rj = (v_rj w_j) u_gj exactly: the numbers are those of the products with a.
 *
 * Everything is computed in double for either T, in a fixed order: z_j's products in
 * four partial sums (coordinates k mod 4), added as (s0 + s1) + (s2 + s3); the sum over
 * samples in four partial sums too (samples j mod 4, each in sample order), added the
 * same way; the result rounded to T once. e^t is this file's own (a degree-13 Taylor
 * polynomial after t = n ln 2 + r, |r| <= ln 2 / 2; within 1e-15 of exp), so that the
 * weights of a block are computed in vector registers. Operations are the same on
 * every instruction set (four-wide vectors of the compiler's vector extension, lowered
 * to what the CPU has; kernels.c is compiled without contraction) and each row is one
 * thread's: a row's result depends on neither the thread count nor the instruction set.
 */
#ifndef DECENTOPT_LOGISTIC_ONCE
#define DECENTOPT_LOGISTIC_ONCE
#define BLOCK 64
typedef double v4d __attribute__((vector_size(32)));

/* Lanes i0..i3 of the eight of a and b (b's are 4..7). */
#if defined(__clang__)
#define PAIRS(a, b, i0, i1, i2, i3) __builtin_shufflevector(a, b, i0, i1, i2, i3)
#else
typedef int64_t v4i __attribute__((vector_size(32)));
#define PAIRS(a, b, i0, i1, i2, i3) __builtin_shuffle(a, b, (v4i){i0, i1, i2, i3})
#endif

/* Vectors go through pointers: no vector is passed by value (whose ABI depends on the
   instruction set). */
static inline void load_v4d(v4d *v, const double *p) { memcpy(v, p, sizeof *v); }

static inline void store_v4d(double *p, const v4d *v) { memcpy(p, v, sizeof *v); }

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
/* Lets GCC turn the selects below into vector blends (values are the same; no code
   here reads the floating-point exception flags). */
#pragma GCC optimize("no-trapping-math")
#endif
/* e^{-|z|} <= 1 (no overflow); 0 where -|z| < -708 (below the smallest normal double). */
static inline double exp_neg_abs(double z) {
    const double log2e = 0x1.71547652b82fep0, shifter = 0x1.8p52;
    const double ln2_hi = 0x1.62e42fefa3800p-1, ln2_lo = 0x1.ef35793c7673p-45;
    const double t_in = -fabs(z);
    const int tiny = t_in < -708.0;
    const double t = tiny ? -708.0 : t_in;
    const double shifted = t * log2e + shifter; /* n = round(t / ln 2) in the low bits */
    const double n = shifted - shifter;
    const double r = (t - n * ln2_hi) - n * ln2_lo; /* n ln2_hi is exact */
    double p = 1.0 / 6227020800.0;                   /* 1 / 13! */
    p = p * r + 1.0 / 479001600.0;
    p = p * r + 1.0 / 39916800.0;
    p = p * r + 1.0 / 3628800.0;
    p = p * r + 1.0 / 362880.0;
    p = p * r + 1.0 / 40320.0;
    p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    uint64_t n_bits, p_bits;
    memcpy(&n_bits, &shifted, sizeof n_bits);
    memcpy(&p_bits, &p, sizeof p_bits);
    p_bits += n_bits << 52; /* p 2^n: n in [-1022, 0] adds to p's exponent */
    double e;
    memcpy(&e, &p_bits, sizeof e);
    return tiny ? 0.0 : e;
}

/* w[b] = scale * sigmoid(-w[b]) = scale / (1 + e^{w[b]}) for b < count, from
   e = e^{-|z|}: 1 / (1 + e) for z <= 0, e / (1 + e) above. */
static void logistic_weights(double *restrict w, int64_t count, double scale) {
    for (int64_t b = 0; b < count; b++) {
        const double z = w[b], e = exp_neg_abs(z);
        w[b] = scale * ((z > 0.0 ? e : 1.0) / (1.0 + e));
    }
}

/* loss[b] = log(1 + e^{-z[b]}) = max(-z, 0) + log1p(e^{-|z|}) for b < count; log1p(e) for
   e in [0, 1] as 2 atanh(s), s = e / (2 + e) <= 1/3, by its series to s^35 (what is left
   is below 2^-60 of it). A loop of its own, as logistic_weights: it vectorises. */
static void logistic_losses(const double *restrict z, double *restrict loss, int64_t count) {
    for (int64_t b = 0; b < count; b++) {
        const double e = exp_neg_abs(z[b]), s = e / (2.0 + e), s2 = s * s;
        double p = 1.0 / 35.0;
        p = p * s2 + 1.0 / 33.0;
        p = p * s2 + 1.0 / 31.0;
        p = p * s2 + 1.0 / 29.0;
        p = p * s2 + 1.0 / 27.0;
        p = p * s2 + 1.0 / 25.0;
        p = p * s2 + 1.0 / 23.0;
        p = p * s2 + 1.0 / 21.0;
        p = p * s2 + 1.0 / 19.0;
        p = p * s2 + 1.0 / 17.0;
        p = p * s2 + 1.0 / 15.0;
        p = p * s2 + 1.0 / 13.0;
        p = p * s2 + 1.0 / 11.0;
        p = p * s2 + 1.0 / 9.0;
        p = p * s2 + 1.0 / 7.0;
        p = p * s2 + 1.0 / 5.0;
        p = p * s2 + 1.0 / 3.0;
        p = p * s2 + 1.0 / 1.0;
        loss[b] = (z[b] < 0.0 ? -z[b] : 0.0) + 2.0 * s * p;
    }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif
#endif /* DECENTOPT_LOGISTIC_ONCE */

#define LFN(name) CAT(name, SUFFIX)
typedef T LFN(v4) __attribute__((vector_size(4 * sizeof(T))));

/* p[0:4] widened to double. */
static inline void LFN(load_wide)(v4d *v, const T *p) {
#if defined(__AVX__)
    if (sizeof(T) == sizeof(float)) { /* one conversion from memory (GCC splits it otherwise) */
        const __m256d wide = _mm256_cvtps_pd(_mm_loadu_ps((const float *)p));
        memcpy(v, &wide, sizeof *v);
        return;
    }
#endif
    LFN(v4) narrow;
    memcpy(&narrow, p, sizeof narrow);
    *v = __builtin_convertvector(narrow, v4d);
}

struct LFN(logistic_job) {
    int64_t m, d, levels, stride;
    const T *u, *v, *x;
    T *out;
    double scale;
    double *loss; /* NULL, or each row's sum_j log(1 + e^{-z_j}) */
};

/* Groups [first, last); scratch: 5 d4 + 4 doubles per level (the point, the four partial
   sums, the loss's four). */
static void LFN(logistic_rows)(const void *shared, int64_t first, int64_t last, void *scratch) {
    const struct LFN(logistic_job) *job = shared;
    const int64_t m = job->m, d = job->d, whole = d - d % 4, d4 = (d + 3) / 4 * 4;
    const int64_t levels = job->levels, stride = job->stride;
    double w[BLOCK];
    for (int64_t group = first; group < last; group++) {
        const T *restrict a = job->u + group * m * d;
        const int64_t row0 = group / stride * stride * levels + group % stride;
        for (int64_t l = 0; l < levels; l++) {
            double *restrict xd = (double *)scratch + l * (5 * d4 + 4), *restrict part = xd + d4;
            const T *restrict x = job->x + (row0 + l * stride) * d;
            for (int64_t k = 0; k < d4; k++) xd[k] = k < d ? (double)x[k] : 0.0;
            for (int64_t k = 0; k < 4 * d4 + 4; k++) part[k] = 0.0;
        }
        for (int64_t j0 = 0; j0 < m; j0 += BLOCK) { /* BLOCK is a multiple of 4: j mod 4 = b mod 4 */
            const int64_t count = m - j0 < BLOCK ? m - j0 : BLOCK, quads = count - count % 4;
            const T *restrict block = a + j0 * d;
            for (int64_t l = 0; l < levels; l++) { /* the block in cache for each level */
                const int64_t r = row0 + l * stride;
                double *restrict xd = (double *)scratch + l * (5 * d4 + 4), *restrict part = xd + d4;
                const T *restrict v = job->v != NULL ? job->v + r * m + j0 : NULL;
                for (int64_t b = 0; b < quads; b += 4) { /* margins, four samples at a time */
                    const T *restrict u = block + b * d;
                    v4d s0 = {0.0, 0.0, 0.0, 0.0}, s1 = s0, s2 = s0, s3 = s0, xk, uk;
                    for (int64_t k = 0; k < whole; k += 4) { /* four independent sums */
                        load_v4d(&xk, xd + k);
                        LFN(load_wide)(&uk, u + k);
                        s0 += uk * xk;
                        LFN(load_wide)(&uk, u + d + k);
                        s1 += uk * xk;
                        LFN(load_wide)(&uk, u + 2 * d + k);
                        s2 += uk * xk;
                        LFN(load_wide)(&uk, u + 3 * d + k);
                        s3 += uk * xk;
                    }
                    for (int64_t k = whole; k < d; k++) {
                        s0[k - whole] += (double)u[k] * xd[k];
                        s1[k - whole] += (double)u[d + k] * xd[k];
                        s2[k - whole] += (double)u[2 * d + k] * xd[k];
                        s3[k - whole] += (double)u[3 * d + k] * xd[k];
                    }
                    /* (s0 + s1) + (s2 + s3) of each of the four, at once */
                    const v4d p = PAIRS(s0, s1, 0, 4, 2, 6) + PAIRS(s0, s1, 1, 5, 3, 7);
                    const v4d q = PAIRS(s2, s3, 0, 4, 2, 6) + PAIRS(s2, s3, 1, 5, 3, 7);
                    const v4d sums = PAIRS(p, q, 0, 1, 4, 5) + PAIRS(p, q, 2, 3, 6, 7);
                    store_v4d(w + b, &sums);
                }
                for (int64_t b = quads; b < count; b++) { /* the last margins, one by one */
                    const T *restrict u = block + b * d;
                    v4d s = {0.0, 0.0, 0.0, 0.0}, uk, xk;
                    for (int64_t k = 0; k < whole; k += 4) {
                        LFN(load_wide)(&uk, u + k);
                        load_v4d(&xk, xd + k);
                        s += uk * xk;
                    }
                    for (int64_t k = whole; k < d; k++) s[k - whole] += (double)u[k] * xd[k];
                    w[b] = (s[0] + s[1]) + (s[2] + s[3]);
                }
                if (v != NULL)
                    for (int64_t b = 0; b < count; b++) w[b] *= (double)v[b]; /* v u . x */
                if (job->loss != NULL) { /* in four partial sums, samples j mod 4 */
                    double lost[BLOCK];
                    logistic_losses(w, lost, count);
                    for (int64_t b = 0; b < count; b++) part[4 * d4 + b % 4] += lost[b];
                }
                logistic_weights(w, count, job->scale);
                if (v != NULL)
                    for (int64_t b = 0; b < count; b++) w[b] *= (double)v[b]; /* w v u */
                for (int64_t k = 0; k < whole; k += 4) { /* four columns, four samples at a time */
                    v4d p0, p1, p2, p3, u0, u1, u2, u3;
                    load_v4d(&p0, part + k);
                    load_v4d(&p1, part + d4 + k);
                    load_v4d(&p2, part + 2 * d4 + k);
                    load_v4d(&p3, part + 3 * d4 + k);
                    for (int64_t b = 0; b < quads; b += 4) {
                        const T *u = block + b * d + k;
                        LFN(load_wide)(&u0, u);
                        LFN(load_wide)(&u1, u + d);
                        LFN(load_wide)(&u2, u + 2 * d);
                        LFN(load_wide)(&u3, u + 3 * d);
                        p0 += w[b] * u0;
                        p1 += w[b + 1] * u1;
                        p2 += w[b + 2] * u2;
                        p3 += w[b + 3] * u3;
                    }
                    store_v4d(part + k, &p0);
                    store_v4d(part + d4 + k, &p1);
                    store_v4d(part + 2 * d4 + k, &p2);
                    store_v4d(part + 3 * d4 + k, &p3);
                }
                for (int64_t b = 0; b < count; b++) { /* the last columns, and the last samples */
                    double *restrict q = part + (b % 4) * d4;
                    const T *restrict u = block + b * d;
                    for (int64_t k = b < quads ? whole : 0; k < d; k++) q[k] += w[b] * (double)u[k];
                }
            }
        }
        for (int64_t l = 0; l < levels; l++) {
            const double *restrict part = (double *)scratch + l * (5 * d4 + 4) + d4;
            T *restrict out = job->out + (row0 + l * stride) * d;
            for (int64_t k = 0; k < d; k++)
                out[k] = (T)((part[k] + part[d4 + k]) + (part[2 * d4 + k] + part[3 * d4 + k]));
            const double *restrict sums = part + 4 * d4;
            if (job->loss != NULL)
                job->loss[row0 + l * stride] = (sums[0] + sums[1]) + (sums[2] + sums[3]);
        }
    }
}

int EXPORT(decentopt_logistic_gradient)(int64_t groups, int64_t levels, int64_t stride,
                                        int64_t m, int64_t d, const T *u, const T *v,
                                        const T *x, T *out, double *loss, double scale,
                                        int threads) {
    if (groups < 0 || levels < 1 || stride < 1 || groups % stride || m < 0 || d < 0) return 1;
    if (groups == 0 || d == 0) return 0;
    const struct LFN(logistic_job) job = {m, d, levels, stride, u, v, x, out, scale, loss};
    const int64_t d4 = (d + 3) / 4 * 4;
    return run_parallel(LFN(logistic_rows), &job, groups, threads,
                        (size_t)((5 * d4 + 4) * levels) * sizeof(double));
}

#undef LFN
