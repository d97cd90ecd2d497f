/* The block kernels of blocks.c for one element type T (names end in SUFFIX). A panel of
 * `runs` runs: x, g, y (d, cols), H (d, d, cols), F (d, k, cols), b (d, cols), with
 * cols = n * runs and column agent * runs + run. */
#define BFN(name) CAT(CAT(block, name), SUFFIX)

/* g = H x - b + F z for a panel; z holds the panel's noise of agent a, run r, coordinate
   j at z[a * zstride + r * k + j]; zt: (k, cols) scratch for it turned column-minor;
   lower: F is lower triangular (its zeros are skipped); wide: z is double, else float. */
static void BFN(gradient)(int64_t d, int64_t k, int lower, int64_t agents, int64_t runs,
                          const T *restrict x, const T *restrict H, const T *restrict F,
                          const T *restrict b, const void *z, int wide, int64_t zstride,
                          T *restrict g, T *restrict zt) {
    const int64_t n = agents * runs;
    for (int64_t a = 0; z && a < agents; a++)
        for (int64_t r = 0; r < runs; r++)
            for (int64_t j = 0; j < k; j++) {
                const int64_t at = a * zstride + r * k + j;
                zt[j * n + a * runs + r] = wide ? (T)((const double *)z)[at] : (T)((const float *)z)[at];
            }
    /* CHUNK columns at a time with fixed-length inner loops: the sums stay in registers
       (measured: loops over all n columns per (i, j) pair spent more on loop control) */
    const int64_t whole = n - n % CHUNK;
    for (int64_t i = 0; i < d; i++) {
        const int64_t used = lower && i + 1 < k ? i + 1 : k; /* a Cholesky factor's row */
        for (int64_t a0 = 0; a0 < whole; a0 += CHUNK) {
            T acc[CHUNK];
            for (int l = 0; l < CHUNK; l++) acc[l] = -b[i * n + a0 + l];
            for (int64_t j = 0; j < d; j++) {
                const T *restrict h = H + (i * d + j) * n + a0, *restrict xj = x + j * n + a0;
                for (int l = 0; l < CHUNK; l++) acc[l] += h[l] * xj[l];
            }
            for (int64_t j = 0; z && j < used; j++) {
                const T *restrict f = F + (i * k + j) * n + a0, *restrict zj = zt + j * n + a0;
                for (int l = 0; l < CHUNK; l++) acc[l] += f[l] * zj[l];
            }
            for (int l = 0; l < CHUNK; l++) g[i * n + a0 + l] = acc[l];
        }
        for (int64_t a = whole; a < n; a++) { /* the last columns one by one */
            T acc = -b[i * n + a];
            for (int64_t j = 0; j < d; j++) acc += H[(i * d + j) * n + a] * x[j * n + a];
            for (int64_t j = 0; z && j < used; j++) acc += F[(i * k + j) * n + a] * zt[j * n + a];
            g[i * n + a] = acc;
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

/* x = W y for a panel: agent a of each coordinate and run reads agent (a + o_q) mod n, a
   row's two contiguous pieces at a time. */
static void BFN(mix)(int64_t d, int64_t agents, int64_t runs, const T *restrict y,
                     T *restrict x, int64_t terms, const int64_t *offsets, const T *weights) {
    const int64_t n = agents * runs;
    for (int64_t i = 0; i < d; i++) {
        T *restrict out = x + i * n;
        const T *restrict row = y + i * n;
        for (int64_t q = 0; q < terms; q++) {
            const int64_t o = offsets[q] * runs, split = n - o;
            const T w = weights[q];
            if (q == 0) {
                for (int64_t a = 0; a < split; a++) out[a] = w * row[a + o];
                for (int64_t a = split; a < n; a++) out[a] = w * row[a - split];
            } else {
                for (int64_t a = 0; a < split; a++) out[a] += w * row[a + o];
                for (int64_t a = split; a < n; a++) out[a] += w * row[a - split];
            }
        }
    }
}

/* Between the caller's (n, R, d) layout and panels of `runs` runs, (R / runs, d, n * runs):
   back (from panels) when `back`. */
static void BFN(panels)(T *restrict stacked, T *restrict panel, int64_t n, int64_t R,
                        int64_t d, int64_t runs, int back) {
    const int64_t cols = n * runs, size = d * cols;
    for (int64_t a = 0; a < n; a++)
        for (int64_t r = 0; r < R; r++) {
            T *restrict row = stacked + (a * R + r) * d;
            T *restrict at = panel + (r / runs) * size + a * runs + r % runs;
            if (back)
                for (int64_t i = 0; i < d; i++) row[i] = at[i * cols];
            else
                for (int64_t i = 0; i < d; i++) at[i * cols] = row[i];
        }
}

/* kind, nesterov, dampening, n, panels, runs (per panel), d, k, lower (F is lower
   triangular), in and out (x, psi, m: (n, R, d) each, R = panels * runs; psi and m NULL
   where the update has none; out may be in), H (panels, d, d, n * runs), F (panels, d, k,
   n * runs), b (panels, d, n * runs), z ((steps, n, R, k) as drawn; NULL: no noise), wide
   (z is double, else float), steps, alphas (one per step), beta, terms, offsets (in
   [0, n)), weights. Runs never mix with each other, so each panel takes every step of
   the block before the next starts: it stays in cache. 0, or 1 when the scratch could
   not be had or the stencil is too long. */
int EXPORT(decentopt_quadratic_steps)(int kind, int nesterov, int dampening, int64_t n,
                                      int64_t panels, int64_t runs, int64_t d, int64_t k,
                                      int lower, T *const *in, T *const *out, const T *H,
                                      const T *F, const T *b, const void *z, int wide,
                                      int64_t steps, const T *alphas, T beta, int64_t terms,
                                      const int64_t *offsets, const T *weights) {
    if (terms < 1 || terms > MAX_TERMS) return 1;
    const int64_t cols = n * runs, size = d * cols, all = panels * runs;
    T *g = malloc((2 * (size_t)size + (size_t)(k * cols) + 3 * (size_t)(panels * size)) *
                  sizeof(T));
    if (g == NULL) return 1;
    T *y = g + size, *zt = y + size, *state[3];
    for (int f = 0; f < 3; f++) {
        state[f] = in[f] ? zt + k * cols + f * panels * size : NULL;
        if (in[f]) BFN(panels)(in[f], state[f], n, all, d, runs, 0);
    }
    const T damp = dampening ? beta : 0, keep = dampening ? 0 : beta;
    for (int64_t p = 0; p < panels; p++) {
        T *xp = state[0] + p * size, *psip = state[1] ? state[1] + p * size : NULL;
        T *mp = state[2] ? state[2] + p * size : NULL;
        const T *Hp = H + p * d * size, *Fp = F + p * k * size, *bp = b + p * size;
        for (int64_t s = 0; s < steps; s++) {
            const int64_t skip = (s * n * all + p * runs) * k;
            const void *zs = !z ? NULL : wide ? (const void *)((const double *)z + skip)
                                              : (const void *)((const float *)z + skip);
            BFN(gradient)(d, k, lower, n, runs, xp, Hp, Fp, bp, zs, wide, all * k, g, zt);
            BFN(update)(kind, nesterov, size, xp, psip, mp, g, y, alphas[s], damp, keep);
            BFN(mix)(d, n, runs, y, xp, terms, offsets, weights);
        }
    }
    for (int f = 0; f < 3; f++)
        if (in[f]) BFN(panels)(out[f], state[f], n, all, d, runs, 1);
    free(g);
    return 0;
}
#undef BFN
