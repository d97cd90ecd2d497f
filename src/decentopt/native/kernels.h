/* The kernels of kernels.c for one element type T (names end in SUFFIX); with
 * VECTOR, LANES-wide vector operations V, LOAD, STOREU, STREAM, SET, ADD, SUB, MUL.
 *
 * Heavy ball, as decentopt.algorithms.base.heavy_ball: m+ = g + damp (m - g) + keep m
 * (damp = beta, keep = 0 with dampening; damp = 0, keep = beta without), and the
 * direction d = m+, or with Nesterov the same formula applied to m+.
 */
#define FN(name) CAT(name, SUFFIX)

/* How many elements of a row to write one by one before dst is 64-byte aligned. */
static int64_t FN(lead)(const T *dst, int64_t w) {
    const uintptr_t off = (uintptr_t)dst & 63;
    if (off % sizeof(T)) return w; /* never aligned: all of it one by one */
    const int64_t head = off ? (int64_t)((64 - off) / sizeof(T)) : 0;
    return head < w ? head : w;
}

/* Heavy ball of one element: m+ (returned) and the direction d. */
static inline T FN(heavy_ball)(T m, T g, T damp, T keep, int nesterov, T *dir) {
    const T mn = g + damp * (m - g) + keep * m;
    *dir = nesterov ? g + damp * (mn - g) + keep * mn : mn;
    return mn;
}

/* Columns [j0, j1) of one row of the update, element by element: one loop per kind,
   with restrict pointers (outputs never alias inputs), so that the compiler
   vectorises them for the baseline instruction set too. */
static void FN(update_scalar)(int kind, int nesterov, const T *const *in, T *const *out,
                              int outputs, int64_t off, int64_t j0, int64_t j1, T alpha, T damp,
                              T keep, T *mixed) {
    const T *restrict x = in[0] + off;
    T *restrict y = mixed;
    if (kind == DESCEND) {
        const T *restrict g = in[1] + off;
        for (int64_t j = j0; j < j1; j++) y[j] = x[j] - alpha * g[j];
    } else if (kind == CORRECT) { /* inputs (x, psi, d): y0 = phi = psi+ + x - psi */
        const T *restrict psi = in[1] + off, *restrict d = in[2] + off;
        T *restrict psi_out = outputs ? out[1] + off : NULL;
        for (int64_t j = j0; j < j1; j++) {
            const T step = x[j] - alpha * d[j];
            y[j] = step + (x[j] - psi[j]);
            if (outputs) psi_out[j] = step;
        }
    } else if (kind == MOMENTUM_DESCEND) { /* inputs (x, m, g) */
        const T *restrict m = in[1] + off, *restrict g = in[2] + off;
        T *restrict m_out = outputs ? out[1] + off : NULL;
        for (int64_t j = j0; j < j1; j++) {
            T dir;
            const T mn = FN(heavy_ball)(m[j], g[j], damp, keep, nesterov, &dir);
            y[j] = x[j] - alpha * dir;
            if (outputs) m_out[j] = mn;
        }
    } else { /* EDM, inputs (x, psi, m, g) */
        const T *restrict psi = in[1] + off, *restrict m = in[2] + off, *restrict g = in[3] + off;
        T *restrict psi_out = outputs ? out[1] + off : NULL;
        T *restrict m_out = outputs ? out[2] + off : NULL;
        for (int64_t j = j0; j < j1; j++) {
            T dir;
            const T mn = FN(heavy_ball)(m[j], g[j], damp, keep, nesterov, &dir);
            const T step = x[j] - alpha * dir;
            y[j] = step + (x[j] - psi[j]);
            if (outputs) {
                psi_out[j] = step;
                m_out[j] = mn;
            }
        }
    }
}

#if VECTOR
/* Columns [j0, j1) (a multiple of LANES, outputs aligned at j0) with vectors and
   non-temporal stores of the outputs. */
static void FN(update_vector)(int kind, int nesterov, const T *const *in, T *const *out,
                              int outputs, int64_t off, int64_t j0, int64_t j1, T alpha, T damp,
                              T keep, T *mixed) {
    const V va = SET(alpha), vd = SET(damp), vk = SET(keep);
    const T *x = in[0] + off;
    if (kind == DESCEND) {
        const T *g = in[1] + off;
        for (int64_t j = j0; j < j1; j += LANES)
            STOREU(mixed + j, SUB(LOAD(x + j), MUL(va, LOAD(g + j))));
        return;
    }
    const int momentum = kind != CORRECT; /* inputs (x, m, g) or (x, psi, m, g) */
    const T *m = !momentum ? NULL : kind == MOMENTUM_DESCEND ? in[1] + off : in[2] + off;
    const T *g = !momentum ? NULL : kind == MOMENTUM_DESCEND ? in[2] + off : in[3] + off;
    T *m_out = !momentum ? NULL : kind == MOMENTUM_DESCEND ? out[1] + off : out[2] + off;
    for (int64_t j = j0; j < j1; j += LANES) {
        V dir;
        if (kind == CORRECT) {
            dir = LOAD(in[2] + off + j);
        } else {
            const V vg = LOAD(g + j), vm = LOAD(m + j);
            const V mn = ADD(ADD(vg, MUL(vd, SUB(vm, vg))), MUL(vk, vm));
            dir = nesterov ? ADD(ADD(vg, MUL(vd, SUB(mn, vg))), MUL(vk, mn)) : mn;
            if (outputs) STREAM(m_out + j, mn);
        }
        const V vx = LOAD(x + j);
        const V step = SUB(vx, MUL(va, dir));
        if (kind == MOMENTUM_DESCEND) {
            STOREU(mixed + j, step);
        } else {
            STOREU(mixed + j, ADD(step, SUB(vx, LOAD(in[1] + off + j))));
            if (outputs) STREAM(out[1] + off + j, step);
        }
    }
}
#endif

/* One row segment (w columns from offset off) of the update; y0 goes to mixed, and
   the other outputs to memory when `outputs` (a halo row computes y0 only). */
static void FN(update_row)(int kind, int nesterov, const T *const *in, T *const *out,
                           int outputs, int64_t off, int64_t w, T alpha, T damp, T keep,
                           T *mixed) {
#if VECTOR
    /* the streamed outputs share one alignment (same shape, allocated alike) */
    const int64_t head = kind == DESCEND ? 0 : FN(lead)(out[1] + off, w);
    const int64_t body = head + (w - head) / LANES * LANES;
    FN(update_scalar)(kind, nesterov, in, out, outputs, off, 0, head, alpha, damp, keep, mixed);
    FN(update_vector)(kind, nesterov, in, out, outputs, off, head, body, alpha, damp, keep, mixed);
    FN(update_scalar)(kind, nesterov, in, out, outputs, off, body, w, alpha, damp, keep, mixed);
#else
    FN(update_scalar)(kind, nesterov, in, out, outputs, off, 0, w, alpha, damp, keep, mixed);
#endif
}

/* dst[j] = sum_q weights[q] rows[q][j] for j in [j0, j1), element by element (terms
   added in order; the ring's three unrolled, the others one pass each, so that the
   compiler vectorises along the row). */
static void FN(mix_scalar)(const T *const *rows, int64_t k, const T *weights, int64_t j0,
                           int64_t j1, T *restrict dst) {
    if (k == 3) {
        const T *restrict r0 = rows[0], *restrict r1 = rows[1], *restrict r2 = rows[2];
        const T c0 = weights[0], c1 = weights[1], c2 = weights[2];
        for (int64_t j = j0; j < j1; j++) dst[j] = c0 * r0[j] + c1 * r1[j] + c2 * r2[j];
        return;
    }
    const T *restrict first = rows[0];
    for (int64_t j = j0; j < j1; j++) dst[j] = weights[0] * first[j];
    for (int64_t q = 1; q < k; q++) {
        const T *restrict r = rows[q];
        const T c = weights[q];
        for (int64_t j = j0; j < j1; j++) dst[j] += c * r[j];
    }
}

/* dst[0:w] = sum_q weights[q] rows[q][0:w]. */
static void FN(mix_row)(const T *const *rows, int64_t k, const T *weights, int64_t w, T *dst) {
#if VECTOR
    const int64_t head = FN(lead)(dst, w);
    const int64_t body = head + (w - head) / LANES * LANES;
    FN(mix_scalar)(rows, k, weights, 0, head, dst);
    if (k == 3) { /* rings */
        const V c0 = SET(weights[0]), c1 = SET(weights[1]), c2 = SET(weights[2]);
        const T *r0 = rows[0], *r1 = rows[1], *r2 = rows[2];
        for (int64_t j = head; j < body; j += LANES)
            STREAM(dst + j, ADD(ADD(MUL(c0, LOAD(r0 + j)), MUL(c1, LOAD(r1 + j))),
                                MUL(c2, LOAD(r2 + j))));
    } else {
        for (int64_t j = head; j < body; j += LANES) {
            V acc = MUL(SET(weights[0]), LOAD(rows[0] + j));
            for (int64_t q = 1; q < k; q++) acc = ADD(acc, MUL(SET(weights[q]), LOAD(rows[q] + j)));
            STREAM(dst + j, acc);
        }
    }
    FN(mix_scalar)(rows, k, weights, body, w, dst);
#else
    FN(mix_scalar)(rows, k, weights, 0, w, dst);
#endif
}

/* The farthest row an output reads, either way round the ring. */
static int64_t FN(reach)(int64_t n, int64_t k, const int64_t *offsets) {
    int64_t reach = 0;
    for (int64_t q = 0; q < k; q++) {
        const int64_t o = offsets[q] < n - offsets[q] ? offsets[q] : n - offsets[q];
        if (o > reach) reach = o;
    }
    return reach;
}

/* A far-reaching stencil: every row of a block of columns kept (rows in order, each
   output mixed once all its rows exist, the ones that wrap around at the end). */
static void FN(all_rows)(int kind, int nesterov, int64_t n, int64_t d, const T *const *in,
                         T *const *out, T alpha, T damp, T keep, int64_t k,
                         const int64_t *offsets, const T *weights, int64_t reach, T *buffer,
                         int64_t a, int64_t w, int64_t width) {
    const T *rows[MAX_TERMS];
    for (int64_t i = 0; i <= n; i++) {
        if (i < n)
            FN(update_row)(kind, nesterov, in, out, 1, i * d + a, w, alpha, damp, keep,
                           buffer + i * width);
        /* after row i: the output row i - reach; after the last, the wrapping ones */
        for (int64_t r = i < n ? i - reach : 0; r < (i < n ? i - reach + 1 : n); r++) {
            const int wraps = r < reach || r >= n - reach;
            if (r < 0 || (i < n) == wraps) continue;
            for (int64_t q = 0; q < k; q++) rows[q] = buffer + ((r + offsets[q]) % n) * width;
            FN(mix_row)(rows, k, weights, w, out[0] + r * d + a);
        }
    }
}

/* A short reach: output rows [r0, r1) of a block of columns. The rows from r0 - reach
   to r1 + reach - 1 (round the ring) are updated in order into a ring of 2 reach + 1
   kept rows -- the ones outside [r0, r1), a halo, for y0 only -- and output row r is
   mixed as soon as row r + reach exists. */
static void FN(row_range)(int kind, int nesterov, int64_t n, int64_t d, const T *const *in,
                          T *const *out, T alpha, T damp, T keep, int64_t k,
                          const int64_t *offsets, const T *weights, int64_t reach, T *buffer,
                          int64_t a, int64_t w, int64_t width, int64_t r0, int64_t r1) {
    const int64_t span = 2 * reach + 1, own = r1 - r0;
    const T *rows[MAX_TERMS];
    for (int64_t s = 0; s < own + 2 * reach; s++) {
        const int64_t j = ((r0 - reach + s) % n + n) % n;
        const int mine = s >= reach && s < reach + own;
        FN(update_row)(kind, nesterov, in, out, mine, j * d + a, w, alpha, damp, keep,
                       buffer + (s % span) * width);
        if (s < 2 * reach) continue;
        const int64_t t = s - 2 * reach, r = r0 + t; /* rows r - reach .. r + reach exist */
        for (int64_t q = 0; q < k; q++) {
            const int64_t o = offsets[q] <= reach ? offsets[q] : offsets[q] - n; /* signed */
            rows[q] = buffer + ((t + reach + o) % span) * width;
        }
        FN(mix_row)(rows, k, weights, w, out[0] + r * d + a);
    }
}

/* What every task of one call shares. */
struct FN(update_job) {
    int kind, nesterov, short_reach;
    int64_t n, d, k, reach, width, parts;
    const T *const *in;
    T *const *out;
    T alpha, damp, keep;
    const int64_t *offsets;
    const T *weights;
};

/* Tasks [first, last): task = block of columns * parts + range of rows. */
static void FN(update_tasks)(const void *shared, int64_t first, int64_t last, void *buffer) {
    const struct FN(update_job) *job = shared;
    const int64_t n = job->n, d = job->d, width = job->width, parts = job->parts;
    for (int64_t task = first; task < last; task++) {
        const int64_t b = task / parts, p = task % parts;
        const int64_t a = b * width, w = d - a < width ? d - a : width;
        if (job->short_reach)
            FN(row_range)(job->kind, job->nesterov, n, d, job->in, job->out, job->alpha,
                          job->damp, job->keep, job->k, job->offsets, job->weights, job->reach,
                          buffer, a, w, width, p * n / parts, (p + 1) * n / parts);
        else
            FN(all_rows)(job->kind, job->nesterov, n, d, job->in, job->out, job->alpha,
                         job->damp, job->keep, job->k, job->offsets, job->weights, job->reach,
                         buffer, a, w, width);
    }
}

int EXPORT(decentopt_update_mix)(int kind, int nesterov, int dampening, int64_t n, int64_t d,
                             const T *const *in, T *const *out, T alpha, T beta, int64_t k,
                             const int64_t *offsets, const T *weights, int64_t width,
                             int threads) {
    if (k < 1 || k > MAX_TERMS || width < 1 || width > MAX_WIDTH || kind < 0 || kind > EDM ||
        n < 0 || d < 0)
        return 1;
    if (n == 0 || d == 0) return 0; /* nothing to compute (and no block to share out) */
    const int64_t reach = FN(reach)(n, k, offsets);
    const int short_reach = n > 4 * reach + 1;
    const int64_t blocks = (d + width - 1) / width;
    /* narrow states: threads share out ranges of rows too (a halo of 2 reach rows each) */
    int64_t parts = short_reach && blocks < threads ? (threads + blocks - 1) / blocks : 1;
    if (parts > n / (2 * reach + 1)) parts = n / (2 * reach + 1) > 0 ? n / (2 * reach + 1) : 1;
    const struct FN(update_job) job = {
        kind, nesterov, short_reach, n, d, k, reach, width, parts, in, out, alpha,
        dampening ? beta : (T)0, dampening ? (T)0 : beta, offsets, weights};
    const int64_t kept = short_reach ? 2 * reach + 1 : n; /* rows of y0 a task keeps */
    return run_parallel(FN(update_tasks), &job, blocks * parts, threads,
                        (size_t)(kept * width) * sizeof(T));
}

struct FN(mix_job) {
    int64_t n, d, k, width;
    const T *z;
    T *out;
    const int64_t *offsets;
    const T *weights;
};

/* Tasks [first, last): task = block of columns * n + output row. */
static void FN(mix_tasks)(const void *shared, int64_t first, int64_t last, void *unused) {
    (void)unused;
    const struct FN(mix_job) *job = shared;
    const int64_t n = job->n, d = job->d, width = job->width;
    const T *rows[MAX_TERMS];
    for (int64_t task = first; task < last; task++) {
        const int64_t b = task / n, r = task % n;
        const int64_t a = b * width, w = d - a < width ? d - a : width;
        for (int64_t q = 0; q < job->k; q++) rows[q] = job->z + ((r + job->offsets[q]) % n) * d + a;
        FN(mix_row)(rows, job->k, job->weights, w, job->out + r * d + a);
    }
}

int EXPORT(decentopt_mix)(int64_t n, int64_t d, const T *z, T *out, int64_t k,
                      const int64_t *offsets, const T *weights, int64_t width, int threads) {
    if (k < 1 || k > MAX_TERMS || width < 1 || n < 0 || d < 0) return 1;
    if (n == 0 || d == 0) return 0;
    const struct FN(mix_job) job = {n, d, k, width, z, out, offsets, weights};
    /* threads share out blocks, or the rows of one block: every output row is its own */
    return run_parallel(FN(mix_tasks), &job, (d + width - 1) / width * n, threads, 0);
}

#undef FN
