/* The block kernels of blocks.c for one element type T (names end in SUFFIX). */
#define BFN(name) CAT(CAT(block, name), SUFFIX)

/* g = H x - b + F z over the (d, cols) layout. */
static void BFN(gradient)(int64_t d, int64_t k, int64_t cols, const T *restrict x,
                          const T *restrict H, const T *restrict F, const T *restrict b,
                          const float *restrict z, T *restrict g) {
    for (int64_t i = 0; i < d; i++) {
        T *restrict gi = g + i * cols;
        const T *restrict bi = b + i * cols;
        for (int64_t a = 0; a < cols; a++) gi[a] = -bi[a];
        for (int64_t j = 0; j < d; j++) {
            const T *restrict h = H + (i * d + j) * cols, *restrict xj = x + j * cols;
            for (int64_t a = 0; a < cols; a++) gi[a] += h[a] * xj[a];
        }
        for (int64_t j = 0; z && j < k; j++) {
            const T *restrict f = F + (i * k + j) * cols;
            const float *restrict zj = z + j * cols;
            for (int64_t a = 0; a < cols; a++) gi[a] += f[a] * (T)zj[a];
        }
    }
}

/* The update, elementwise over `size` entries; y is what the agents mix. Heavy ball as
   kernels.h: m+ = g + damp (m - g) + keep m, direction m+ (or Nesterov's on m+). */
static void BFN(update)(int kind, int nesterov, int64_t size, const T *restrict x,
                        T *restrict psi, T *restrict m, const T *restrict g, T *restrict y,
                        T alpha, T damp, T keep) {
    for (int64_t e = 0; e < size; e++) {
        T dir = g[e];
        if (kind == MOMENTUM_DESCEND || kind == EDM) {
            const T mn = g[e] + damp * (m[e] - g[e]) + keep * m[e];
            dir = nesterov ? g[e] + damp * (mn - g[e]) + keep * mn : mn;
            m[e] = mn;
        }
        const T step = x[e] - alpha * dir;
        if (kind == CORRECT || kind == EDM) {
            y[e] = step + (x[e] - psi[e]);
            psi[e] = step;
        } else {
            y[e] = step;
        }
    }
}

/* x = W y: agent row i of each coordinate reads rows (i + o_q) mod n of y. */
static void BFN(mix)(int64_t d, int64_t n, int64_t runs, const T *restrict y, T *restrict x,
                     int64_t terms, const int64_t *offsets, const T *weights) {
    const int64_t cols = n * runs;
    for (int64_t i = 0; i < d; i++) {
        for (int64_t agent = 0; agent < n; agent++) {
            T *restrict out = x + i * cols + agent * runs;
            for (int64_t q = 0; q < terms; q++) {
                const T *restrict src = y + i * cols + ((agent + offsets[q]) % n) * runs;
                const T w = weights[q];
                if (q == 0)
                    for (int64_t r = 0; r < runs; r++) out[r] = w * src[r];
                else
                    for (int64_t r = 0; r < runs; r++) out[r] += w * src[r];
            }
        }
    }
}

/* kind, nesterov, dampening, n, runs, d, k, x, psi, m, H, F, b, z (NULL: no noise),
   steps, alphas (one per step), beta, terms, offsets (in [0, n)), weights. psi and m
   may be NULL where the update has none. 0, or 1 when the scratch could not be had or
   the stencil is too long. */
int EXPORT(decentopt_quadratic_steps)(int kind, int nesterov, int dampening, int64_t n,
                                      int64_t runs, int64_t d, int64_t k, T *x, T *psi, T *m,
                                      const T *H, const T *F, const T *b, const float *z,
                                      int64_t steps, const T *alphas, T beta, int64_t terms,
                                      const int64_t *offsets, const T *weights) {
    if (terms < 1 || terms > MAX_TERMS) return 1;
    const int64_t cols = n * runs, size = d * cols;
    T *g = malloc(2 * (size_t)size * sizeof(T));
    if (g == NULL) return 1;
    T *y = g + size;
    const T damp = dampening ? beta : 0, keep = dampening ? 0 : beta;
    for (int64_t s = 0; s < steps; s++) {
        BFN(gradient)(d, k, cols, x, H, F, b, z ? z + s * k * cols : NULL, g);
        BFN(update)(kind, nesterov, size, x, psi, m, g, y, alphas[s], damp, keep);
        BFN(mix)(d, n, runs, y, x, terms, offsets, weights);
    }
    free(g);
    return 0;
}
#undef BFN
