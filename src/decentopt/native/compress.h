/* CHOCO-gossip's compressed round for element type T (names end in SUFFIX), included
 * by kernels.c after kernels.h. U is the unsigned integer of T's width: the bits of
 * |x| as U order magnitudes as the numbers do (NaN above infinity).
 *
 * decentopt_choco_<t>_<isa> takes an (n, D) state z, its public copies hat and
 * s = W hat (double, updated in place), and for the rows of k entries of every agent
 * row computes
 *
 *     q = Q(z - hat),   hat += q,   s = W hat (see below),   out = z + gamma (s - hat),
 *
 * with Q one of TOP_K, QSGD, SIGN (decentopt.compression's operators, same numbers)
 * in two passes. Phase 1, agent by agent, reads z and hat and keeps only what q needs
 * of a whole row (top-k: its kept indices and values, quantised in cache; qsgd, sign:
 * the row's unit, and qsgd's scale). Phase 2 for top-k, agent by agent (each agent's
 * as soon as its neighbours' phase 1 has run, while its own x, g and hat are still in
 * cache: choco_pipelined) in chunks of columns, adds its own and its neighbours' q to
 * hat and s by a merge
 * over the sorted index lists (nothing densified, only the kept entries touched:
 * s += sum_o w_o q[(i + o) mod n], each term w_o q rounded to T, added one by one in
 * stencil order); for qsgd and sign, whose q is dense, chunk by chunk over all
 * agents, it computes q again from z - hat (read there anyway: no per-entry code is
 * written and read back), then recomputes s = sum_o w_o hat[(i + o) mod n] in float64
 * from the new hat (S = W X_hat is what CHOCO keeps; not reading S saves 8 bytes per
 * entry), and writes hat, s and the output by non-temporal stores.
 *
 * Given x, g and alpha instead of z (z NULL), z is DSGD's update x - alpha g (rounded
 * as kernels.h's descend: no contraction), computed chunk by chunk wherever z is read
 * and never written: the rule's update and the round are one kernel, and the state
 * moves 4 bytes per entry fewer than a separate update (x and g read twice, 16 bytes,
 * against z written, then read twice, 12).
 */
#define FN(name) CAT(name, SUFFIX)
#define STREAM_T CAT(stream, SUFFIX)
#ifndef CHUNK
#define CHUNK 1024
#if defined(__AVX2__)
/* Of 8 entries of d, the lanes whose |d|'s top 11 bits (the key's, kernels.c's U) are
   above b and equal to b, as bit masks. */
static inline void top_masks_f32(const float *d, uint32_t b, unsigned *above, unsigned *equal) {
    const __m256i top = _mm256_srli_epi32(
        _mm256_and_si256(_mm256_loadu_si256((const __m256i *)d), _mm256_set1_epi32(INT32_MAX)),
        20);
    const __m256i bin = _mm256_set1_epi32((int32_t)b);
    *above = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(top, bin)));
    *equal = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(top, bin)));
}

static inline void top_masks_f64(const double *d, uint64_t b, unsigned *above,
                                 unsigned *equal) {
    const __m256i bin = _mm256_set1_epi64x((int64_t)b), magnitude = _mm256_set1_epi64x(INT64_MAX);
    unsigned up = 0, at = 0;
    for (int half = 0; half < 2; half++) {
        const __m256i top = _mm256_srli_epi64(
            _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(d + 4 * half)), magnitude), 52);
        up |= (unsigned)_mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpgt_epi64(top, bin)))
              << (4 * half);
        at |= (unsigned)_mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpeq_epi64(top, bin)))
              << (4 * half);
    }
    *above = up;
    *equal = at;
}
#endif

/* Phase 2's end for one agent of a float state over m columns: s = sum_q w_q term_q
   (float64, the stencil's terms in order: w_0 t_0, then + w_q t_q), the output
   z + gamma (float)(s - x_hat), and x_hat, s and the output written. With AVX2 and
   x_hat, s and the output aligned alike, 8 columns at a time, each stored by a
   non-temporal store straight from registers (no buffer of s or of the output);
   returns the columns done: all, or none (then the caller's loops run, to the same
   numbers). */
#if defined(__AVX2__)
static inline void finish_column_f32(int64_t j, int64_t terms, const double *const *term,
                                     const double *w, const double *restrict mine,
                                     const float *restrict z, float gamma, double *restrict hat,
                                     double *restrict s, float *restrict out) {
    double acc = w[0] * term[0][j];
    for (int64_t q = 1; q < terms; q++) acc += w[q] * term[q][j];
    out[j] = z[j] + gamma * (float)(acc - mine[j]);
    hat[j] = mine[j];
    s[j] = acc;
}
#endif

static int64_t finish_f32(int64_t m, int64_t terms, const double *const *term,
                          const double *w, const double *restrict mine,
                          const float *restrict z, float gamma, double *restrict hat,
                          double *restrict s, float *restrict out) {
#if defined(__AVX2__)
    const int64_t head = (int64_t)((32 - ((uintptr_t)out & 31)) & 31) / 4;
    if (((uintptr_t)out & 3) || ((uintptr_t)(hat + head) & 31) || ((uintptr_t)(s + head) & 31))
        return 0;
    const __m256 g = _mm256_set1_ps(gamma);
    int64_t j = 0;
    for (; j < head && j < m; j++) finish_column_f32(j, terms, term, w, mine, z, gamma, hat, s, out);
    for (; j + 8 <= m; j += 8) {
        __m256d lo = _mm256_mul_pd(_mm256_set1_pd(w[0]), _mm256_loadu_pd(term[0] + j));
        __m256d hi = _mm256_mul_pd(_mm256_set1_pd(w[0]), _mm256_loadu_pd(term[0] + j + 4));
        for (int64_t q = 1; q < terms; q++) {
            const __m256d wq = _mm256_set1_pd(w[q]);
            lo = _mm256_add_pd(lo, _mm256_mul_pd(wq, _mm256_loadu_pd(term[q] + j)));
            hi = _mm256_add_pd(hi, _mm256_mul_pd(wq, _mm256_loadu_pd(term[q] + j + 4)));
        }
        const __m256d mlo = _mm256_loadu_pd(mine + j), mhi = _mm256_loadu_pd(mine + j + 4);
        const __m256 diff = _mm256_set_m128(_mm256_cvtpd_ps(_mm256_sub_pd(hi, mhi)),
                                            _mm256_cvtpd_ps(_mm256_sub_pd(lo, mlo)));
        _mm256_stream_pd(hat + j, mlo);
        _mm256_stream_pd(hat + j + 4, mhi);
        _mm256_stream_pd(s + j, lo);
        _mm256_stream_pd(s + j + 4, hi);
        _mm256_stream_ps(out + j, _mm256_add_ps(_mm256_loadu_ps(z + j), _mm256_mul_ps(g, diff)));
    }
    for (; j < m; j++) finish_column_f32(j, terms, term, w, mine, z, gamma, hat, s, out);
    return m;
#else
    (void)m, (void)terms, (void)term, (void)w, (void)mine, (void)z, (void)gamma, (void)hat,
        (void)s, (void)out;
    return 0;
#endif
}

/* finish_f32's counterpart for double states: the caller's loops do it all. */
static int64_t finish_f64(int64_t m, int64_t terms, const double *const *term,
                          const double *w, const double *restrict mine,
                          const double *restrict z, double gamma, double *restrict hat,
                          double *restrict s, double *restrict out) {
    (void)m, (void)terms, (void)term, (void)w, (void)mine, (void)z, (void)gamma, (void)hat,
        (void)s, (void)out;
    return 0;
}
#endif

static inline U FN(key)(T x) {
    U bits;
    memcpy(&bits, &x, sizeof bits);
    return bits & (((U)1 << (8 * sizeof(U) - 1)) - 1); /* the sign bit cleared */
}

/* The kept-th largest key among a row's candidates (keys[0:m), all with the same top
   11 bits, need of them kept) by radix selection, 8 bits at a time below those (keys
   filtered in place), and in *ties how many of the entries equal to it are kept: the
   lowest indices among them. */
#define TOP_SHIFT (8 * (int)sizeof(U) - 12)
static U FN(threshold)(U *keys, int64_t m, int64_t need, int64_t *ties) {
    for (int shift = TOP_SHIFT; shift > 0;) {
        const int next = shift > 8 ? shift - 8 : 0;
        const U mask = ((U)1 << (shift - next)) - 1;
        int64_t hist[256] = {0};
        for (int64_t c = 0; c < m; c++) hist[(keys[c] >> next) & mask]++;
        U b = mask;
        while (hist[b] < need) need -= hist[b--];
        int64_t left = 0;
        for (int64_t c = 0; c < m; c++)
            if (((keys[c] >> next) & mask) == b) keys[left++] = keys[c];
        m = left;
        shift = next;
    }
    *ties = need;
    return keys[0];
}

/* The indices j of d[0:k) whose key's top 11 bits exceed b (sure to be kept) into
   sure, those equal to b (candidates) into cand, both ascending; their counts in *ns,
   *nc. Each list takes up to 8 slots past its count (k + 8 in all). With AVX2, 8
   entries at a time: their masks left-packed by a permutation (pack: each mask's set
   lanes, 4 bits each). */
static void FN(split)(const T *restrict d, int64_t k, U b, const uint32_t *pack,
                      int32_t *restrict sure, int64_t *ns, int32_t *restrict cand, int64_t *nc) {
    int64_t s = 0, c = 0, j = 0;
#if defined(__AVX2__)
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i nibbles = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    for (; j + 8 <= k; j += 8) {
        unsigned above, equal;
        CAT(top_masks, SUFFIX)(d + j, b, &above, &equal);
        const __m256i ids = _mm256_add_epi32(_mm256_set1_epi32((int32_t)j), lanes);
        const __m256i up = _mm256_and_si256(
            _mm256_srlv_epi32(_mm256_set1_epi32((int32_t)pack[above]), nibbles),
            _mm256_set1_epi32(15));
        const __m256i at = _mm256_and_si256(
            _mm256_srlv_epi32(_mm256_set1_epi32((int32_t)pack[equal]), nibbles),
            _mm256_set1_epi32(15));
        _mm256_storeu_si256((__m256i *)(sure + s), _mm256_permutevar8x32_epi32(ids, up));
        _mm256_storeu_si256((__m256i *)(cand + c), _mm256_permutevar8x32_epi32(ids, at));
        s += __builtin_popcount(above);
        c += __builtin_popcount(equal);
    }
#else
    (void)pack;
#endif
    for (; j < k; j++) { /* branch-free: most entries are neither */
        const U top = FN(key)(d[j]) >> TOP_SHIFT;
        sure[s] = cand[c] = (int32_t)j;
        s += top > b;
        c += top == b;
    }
    *ns = s;
    *nc = c;
}

struct FN(choco_job);
static inline const T *FN(z_at)(const struct FN(choco_job) *job, int64_t c0, int64_t m,
                                T *restrict buf);

/* The sum of |d| (squares: of d^2) over a row, d = z - hat rounded to T (z from row
   c0 of the state), in double, chunk by chunk (d never stored): in 8 lanes added in a
   fixed order at the end, the entries past the last multiple of 8 after them:
   vectorised, and the same whatever the threads (for float rows the sum of |d| is exact
   in any order). */
static double FN(difference)(const struct FN(choco_job) *job, int64_t c0,
                             const double *restrict hat, int64_t k, int squares,
                             T *restrict zbuf) {
    double lane[8] = {0}, sum = 0.0;
    T tail[8];
    int64_t rest = 0;
    const int64_t body = k / 8 * 8;
    for (int64_t a = 0; a < k; a += CHUNK) { /* CHUNK is a multiple of 8: lanes stay */
        const int64_t m = k - a < CHUNK ? k - a : CHUNK, full = body - a < m ? body - a : m;
        const T *restrict z = FN(z_at)(job, c0 + a, m, zbuf);
        const double *restrict h = hat + a;
        if (squares)
            for (int64_t i = 0; i < full; i += 8)
                for (int l = 0; l < 8; l++) {
                    const double d = (double)(T)((double)z[i + l] - h[i + l]);
                    lane[l] += d * d;
                }
        else
            for (int64_t i = 0; i < full; i += 8)
                for (int l = 0; l < 8; l++)
                    lane[l] += fabs((double)(T)((double)z[i + l] - h[i + l]));
        for (int64_t i = full; i < m; i++) tail[rest++] = (T)((double)z[i] - h[i]);
    }
    for (int l = 0; l < 8; l++) sum += lane[l];
    for (int64_t i = 0; i < rest; i++)
        sum += squares ? (double)tail[i] * (double)tail[i] : fabs((double)tail[i]);
    return sum;
}

/* A 32-bit hash of (key, j), a bijection of j for each key: qsgd's uniform for entry j
   is hash * 2^-32 (decentopt.compression._bits.uniforms computes the same). */
static inline uint32_t FN(mix)(uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x2c1b3c6dU;
    return x ^ (x >> 16);
}

struct FN(choco_job) {
    int op;
    int64_t n, D, k, kept, terms;
    double levels, per_unit; /* qsgd: s, and s tau (a row's unit is its norm / (s tau)) */
    const T *z;
    double *hat, *s;
    T *out;
    T gamma;
    const uint64_t *keys; /* qsgd: one per row of k */
    int32_t *idx;         /* top-k: kept indices per row, ascending (kept + 1 slots) */
    T *vals;              /* and their values */
    double *units;        /* qsgd, sign: one per row */
    double *scales;       /* qsgd: levels / norm per row (units' second half) */
    const int64_t *offsets;
    const T *weights;
    const double *weights64; /* qsgd, sign: S = W X_hat in float64 */
    int64_t wide;            /* qsgd, sign: columns of a phase-2 chunk */
    const T *x, *g;          /* z = x - alpha g where z is NULL */
    T alpha;
    int64_t reach;          /* top-k: the farthest neighbour, in agents either way */
    unsigned char *applied; /* top-k: the agents whose phase 2 has run */
};

/* z over [c0, c0 + m) of the state (m <= CHUNK): the given z, or x - alpha g computed
   into buf. */
static inline const T *FN(z_at)(const struct FN(choco_job) *job, int64_t c0, int64_t m,
                                T *restrict buf) {
    if (job->z != NULL) return job->z + c0;
    const T *restrict x = job->x + c0, *restrict g = job->g + c0;
    const T alpha = job->alpha;
    for (int64_t j = 0; j < m; j++) buf[j] = x[j] - alpha * g[j];
    return buf;
}

/* Phase 1 of top-k for one row (index row): d = z - x_hat into the scratch after zbuf
   and the histogram of its keys' top 11 bits; the bin holding the kept-th largest key
   found from it; one pass over d then lists the entries above that bin (all kept) and
   in it (candidates); the threshold refined over the candidates only, and the kept
   candidates merged with the others into the row's kept indices and values. */
static void FN(top_k_row)(const struct FN(choco_job) *job, int64_t row, const uint32_t *pack,
                          T *restrict zbuf) {
    const int64_t k = job->k;
    const double *restrict hat = job->hat + row * k;
    T *restrict d = zbuf + CHUNK;
    U *restrict keys = (U *)(d + k);
    int32_t *restrict sure = (int32_t *)(keys + k), *restrict cand = sure + k + 8;
    /* two histograms, even and odd entries: increments of one bin wait less; int32
       (k <= INT32_MAX): 16 KB, half of a level-1 cache */
    int32_t hist[2][2048] = {{0}};
    int64_t j = 0;
    for (int64_t a = 0; a < k; a += CHUNK) { /* CHUNK is even: pairs stay pairs */
        const int64_t end = k - a < CHUNK ? k : a + CHUNK;
        /* the differences first (a loop that vectorises), then their histogram */
        if (job->z == NULL) { /* z = x - alpha g where it is read, never stored */
            const T *restrict x = job->x + row * k, *restrict g = job->g + row * k;
            const T alpha = job->alpha;
            for (j = a; j < end; j++) {
                const T z = x[j] - alpha * g[j];
                d[j] = (T)((double)z - hat[j]);
            }
        } else {
            const T *restrict z = job->z + row * k;
            for (j = a; j < end; j++) d[j] = (T)((double)z[j] - hat[j]);
        }
        for (j = a; j + 2 <= end; j += 2) {
            hist[0][FN(key)(d[j]) >> TOP_SHIFT]++;
            hist[1][FN(key)(d[j + 1]) >> TOP_SHIFT]++;
        }
        if (j < end) hist[0][FN(key)(d[j]) >> TOP_SHIFT]++;
    }
    for (int b = 0; b < 2048; b++) hist[0][b] += hist[1][b];
    int64_t need = job->kept, ns, nc, ties;
    U bin = 2047;
    while (hist[0][bin] < need) need -= hist[0][bin--];
    FN(split)(d, k, bin, pack, sure, &ns, cand, &nc);
    for (int64_t c = 0; c < nc; c++) keys[c] = FN(key)(d[cand[c]]);
    const U t = FN(threshold)(keys, nc, need, &ties);
    int64_t picked = 0; /* the candidates kept, ascending: ties to the lowest indices */
    for (int64_t c = 0; c < nc; c++) {
        const U key = FN(key)(d[cand[c]]);
        cand[picked] = cand[c];
        picked += key > t || (key == t && ties > 0);
        ties -= key == t;
    }
    sure[ns] = cand[picked] = INT32_MAX; /* sentinels: the merge runs branch-free */
    int32_t *restrict idx = job->idx + row * (job->kept + 1);
    T *restrict vals = job->vals + row * (job->kept + 1);
    for (int64_t e = 0, p = 0, q = 0; e < job->kept; e++) {
        const int32_t above = sure[p], in = cand[q], first = above < in;
        idx[e] = first ? above : in;
        vals[e] = d[idx[e]];
        p += first;
        q += !first;
    }
}

/* Phase 1 for agents [first, last): each row's q in its short form. */
static void FN(choco_encode)(const void *shared, int64_t first, int64_t last, void *scratch) {
    const struct FN(choco_job) *job = shared;
    const int64_t k = job->k, rows = job->D / k;
    uint32_t pack[256]; /* top-k: a mask's set lanes, 4 bits each, lowest first */
    for (unsigned mask = 0; job->op == TOP_K && mask < 256; mask++) {
        pack[mask] = 0;
        for (unsigned lane = 0, at = 0; lane < 8; lane++)
            if (mask >> lane & 1) pack[mask] |= lane << (4 * at++);
    }
    for (int64_t row = first * rows; row < last * rows; row++) {
        if (job->op == TOP_K) {
            FN(top_k_row)(job, row, pack, scratch);
            continue;
        }
        const double sum =
            FN(difference)(job, row * k, job->hat + row * k, k, job->op == QSGD, scratch);
        if (job->op == SIGN) {
            job->units[row] = (double)(T)(sum / (double)k);
            continue;
        }
        const double norm = (double)(T)sqrt(sum);
        job->units[row] = norm / job->per_unit;
        job->scales[row] = job->levels / (norm > 0 ? norm : 1.0);
    }
}

/* Phase 2's x_hat + q over columns [a, a + m) of one row (index row) of k, with z
   and x_hat there: q recomputed from z - x_hat (the numbers phase 1 summed) and the
   row's unit, the same q as decentopt.compression's, into fresh. */
static void FN(fresh)(const struct FN(choco_job) *job, int64_t row, int64_t a, int64_t m,
                      const T *restrict z, const double *restrict hat, double *restrict fresh) {
    const double unit = job->units[row];
    if (job->op == SIGN) {
        for (int64_t j = 0; j < m; j++) {
            const T d = (T)((double)z[j] - hat[j]);
            fresh[j] = hat[j] + (double)((T)unit * (T)(1 - 2 * (d < 0)));
        }
        return;
    }
    const double scale = job->scales[row];
    const uint32_t lo = (uint32_t)job->keys[row], hi = (uint32_t)(job->keys[row] >> 32);
    const int32_t top = (int32_t)job->levels;
    for (int64_t j = 0; j < m; j++) { /* |d| scale + u >= 0: truncation floors */
        const T d = (T)((double)z[j] - hat[j]);
        const uint32_t h = FN(mix)(FN(mix)((uint32_t)(a + j) ^ lo) ^ hi);
        const double u = ((double)(int32_t)(h ^ 0x80000000U) + 0x1p31) * 0x1p-32;
        const int32_t l = (int32_t)(fabs((double)d) * scale + u);
        const int32_t level = l > top ? top : l;
        fresh[j] = hat[j] + (double)((T)((double)level * unit) * (T)(1 - 2 * (d < 0)));
    }
}

/* Phase 2 of top-k, columns [a, b) of one row of k (its first column c0 in the state):
   the output from the old x_hat and s first, into a buffer (that pass streams the
   chunk into cache, where the scattered updates then find it); then the output again
   at the entries they changed, and the buffer written by non-temporal stores where the
   CPU has them (no output line read first). */
static void FN(choco_chunk)(const struct FN(choco_job) *job, int64_t agent, int64_t r,
                            int64_t a, int64_t b, int64_t *cursor, T *restrict zbuf) {
    const int64_t n = job->n, k = job->k, rows = job->D / k, c0 = agent * job->D + r * k;
    const T *restrict z = FN(z_at)(job, c0 + a, b - a, zbuf); /* from column a */
    double *restrict h2 = job->hat + c0, *restrict s2 = job->s + c0;
#if defined(__AVX512F__) || defined(__AVX2__)
    T buffer[CHUNK], *restrict res = buffer; /* from column a, streamed to the output */
#else
    T *restrict res = job->out + c0 + a; /* no non-temporal stores: the output itself */
#endif
    for (int64_t j = a; j < b; j++) res[j - a] = z[j - a] + job->gamma * (T)(s2[j] - h2[j]);
    int64_t from[MAX_TERMS + 1];
    for (int64_t q = -1; q < job->terms; q++) { /* -1: the agent's own q into hat */
        const int64_t i = q < 0 ? agent : (agent + job->offsets[q]) % n;
        const int64_t base = (i * rows + r) * (job->kept + 1), end = base + job->kept;
        int64_t c = from[q + 1] = cursor[q + 1];
        for (; base + c < end && job->idx[base + c] < b; c++) {
            const int64_t j = job->idx[base + c];
            if (q < 0)
                h2[j] += (double)job->vals[base + c];
            else
                s2[j] += (double)(job->weights[q] * job->vals[base + c]);
        }
        cursor[q + 1] = c;
    }
    int64_t touched = 0;
    for (int64_t q = 0; q <= job->terms; q++) touched += cursor[q] - from[q];
    if (8 * touched > b - a) { /* dense changes: the whole chunk again, in cache */
        for (int64_t j = a; j < b; j++) res[j - a] = z[j - a] + job->gamma * (T)(s2[j] - h2[j]);
    } else {
        for (int64_t q = -1; q < job->terms; q++) {
            const int64_t i = q < 0 ? agent : (agent + job->offsets[q]) % n;
            const int32_t *list = job->idx + (i * rows + r) * (job->kept + 1);
            for (int64_t c = from[q + 1]; c < cursor[q + 1]; c++) {
                const int64_t j = list[c];
                res[j - a] = z[j - a] + job->gamma * (T)(s2[j] - h2[j]);
            }
        }
    }
#if defined(__AVX512F__) || defined(__AVX2__)
    STREAM_T(job->out + c0 + a, res, b - a);
#endif
}

/* Phase 2 of qsgd and sign, tasks [first, last) = (row segment, chunk of columns):
   x_hat + q of every agent for the chunk into the scratch (n x wide rows, in cache),
   then per agent s = W x_hat (the stencil's terms in order, float64 weights: S = W X_hat
   exactly as CHOCO keeps it, without reading S), the output, and x_hat written back.
   Threads own whole chunks, so no agent's x_hat is read after another wrote it. */
static void FN(choco_dense)(const void *shared, int64_t first, int64_t last, void *scratch) {
    const struct FN(choco_job) *job = shared;
    const int64_t n = job->n, k = job->k, rows = job->D / k, wide = job->wide;
    const int64_t chunks = (k + wide - 1) / wide;
    double *restrict fresh = scratch, *restrict acc = fresh + n * wide;
    T *restrict zs = (T *)(acc + wide); /* x - alpha g of every agent, where z is NULL */
    for (int64_t task = first; task < last; task++) {
        const int64_t r = task / chunks, a = task % chunks * wide;
        const int64_t m = k - a < wide ? k - a : wide;
        for (int64_t i = 0; i < n; i++) {
            const int64_t c0 = i * job->D + r * k + a;
            FN(fresh)(job, i * rows + r, a, m, FN(z_at)(job, c0, m, zs + i * wide),
                      job->hat + c0, fresh + i * wide);
        }
        for (int64_t i = 0; i < n; i++) {
            const int64_t c0 = i * job->D + r * k + a;
            const double *restrict mine = fresh + i * wide;
            const T *restrict z = job->z != NULL ? job->z + c0 : zs + i * wide;
            double *restrict hat = job->hat + c0, *restrict s = job->s + c0;
            T *restrict out = job->out + c0;
            const double *term[MAX_TERMS];
            for (int64_t q = 0; q < job->terms; q++)
                term[q] = fresh + (i + job->offsets[q]) % n * wide;
            if (CAT(finish, SUFFIX)(m, job->terms, term, job->weights64, mine, z, job->gamma, hat,
                                    s, out) == m)
                continue;
            const double *restrict first_term = fresh + (i + job->offsets[0]) % n * wide;
            for (int64_t j = 0; j < m; j++) acc[j] = job->weights64[0] * first_term[j];
            for (int64_t q = 1; q < job->terms; q++) {
                const double *restrict term = fresh + (i + job->offsets[q]) % n * wide;
                const double w = job->weights64[q];
                for (int64_t j = 0; j < m; j++) acc[j] += w * term[j];
            }
            T result[CHUNK];
            for (int64_t j = 0; j < m; j++) result[j] = z[j] + job->gamma * (T)(acc[j] - mine[j]);
            stream_f64(hat, mine, m);
            stream_f64(s, acc, m);
            STREAM_T(out, result, m);
        }
    }
}

static void FN(choco_apply)(const void *shared, int64_t first, int64_t last, void *scratch) {
    const struct FN(choco_job) *job = shared;
    const int64_t k = job->k, rows = job->D / k;
    for (int64_t agent = first; agent < last; agent++)
        for (int64_t r = 0; r < rows; r++) {
            int64_t cursor[MAX_TERMS + 1] = {0};
            for (int64_t a = 0; a < k; a += CHUNK)
                FN(choco_chunk)(job, agent, r, a, a + CHUNK < k ? a + CHUNK : k, cursor, scratch);
        }
}

/* Top-k's two phases agent by agent over agents [first, last): phase 2 of an agent runs
   as soon as phase 1 has run for all its neighbours, that is right after phase 1 of
   the agent reach places ahead, while its x, g and x_hat, read by its own phase 1, are
   still in the last-level cache (on ring(32), 10^5 float32 per agent: 0.9-0.95x the time
   of phase 1 for all agents, then phase 2 for all). Agents with a neighbour outside the
   range (for exponential graphs: all) are left to choco_rest. */
static void FN(choco_pipelined)(const void *shared, int64_t first, int64_t last, void *scratch) {
    const struct FN(choco_job) *job = shared;
    const int64_t reach = job->reach;
    for (int64_t i = first; i < last; i++) {
        FN(choco_encode)(shared, i, i + 1, scratch);
        const int64_t j = i - reach; /* its farthest neighbour ahead is i */
        if (j - reach >= first) {
            FN(choco_apply)(shared, j, j + 1, scratch);
            job->applied[j] = 1;
        }
    }
}

/* Phase 2 of the agents choco_pipelined left, once phase 1 has run for all. */
static void FN(choco_rest)(const void *shared, int64_t first, int64_t last, void *scratch) {
    const struct FN(choco_job) *job = shared;
    for (int64_t agent = first; agent < last; agent++)
        if (!job->applied[agent]) FN(choco_apply)(shared, agent, agent + 1, scratch);
}

int EXPORT(decentopt_choco)(int op, int64_t n, int64_t D, int64_t k, int64_t kept,
                            double levels, double per_unit, const T *z, double *hat, double *s,
                            T *out, T gamma,
                            const uint64_t *keys, int32_t *idx, T *vals,
                            double *units, int64_t terms, const int64_t *offsets,
                            const T *weights, const double *weights64, const T *x,
                            const T *g, T alpha, int threads) {
    if (op < TOP_K || op > SIGN || terms < 1 || terms > MAX_TERMS || n < 0 || k < 1 ||
        D % k || (op == TOP_K && (kept < 1 || kept > k)) || k > INT32_MAX ||
        (z == NULL && (x == NULL || g == NULL)))
        return 1;
    struct FN(choco_job) job = {op,  n,     D,    k,     kept, terms, levels, per_unit,
                                      z,   hat,   s,    out,   gamma, keys, idx, vals,
                                      units, units + n * (D / k), offsets, weights, weights64, 0,
                                      x, g, alpha};
    const size_t scratch = op == TOP_K ? (size_t)(k + CHUNK) * sizeof(T) + k * sizeof(U) +
                                             2 * (k + 8) * sizeof(int32_t)
                                       : CHUNK * sizeof(T);
    if (op == TOP_K) {
        for (int64_t q = 0; n > 0 && q < terms; q++) { /* o ahead is n - o behind */
            const int64_t o = offsets[q] % n, apart = o <= n / 2 ? o : n - o;
            if (apart > job.reach) job.reach = apart;
        }
        job.applied = calloc((size_t)n + 1, 1); /* + 1: never a request for 0 bytes */
        if (job.applied == NULL) return 2;
        int failed = run_parallel(FN(choco_pipelined), &job, n, threads, scratch);
        if (!failed)
            failed = run_parallel(FN(choco_rest), &job, n, threads,
                                  z == NULL ? CHUNK * sizeof(T) : 0);
        free(job.applied);
        return 2 * failed;
    }
    if (run_parallel(FN(choco_encode), &job, n, threads, scratch)) return 2;
    /* a chunk of all n agents' x_hat in 256 KB */
    job.wide = n > 0 && 32768 / n < CHUNK ? (32768 / n > 8 ? 32768 / n : 8) : CHUNK;
    const int64_t chunks = (k + job.wide - 1) / job.wide;
    return 2 * run_parallel(FN(choco_dense), &job, D / k * chunks, threads,
                            (size_t)(n + 1) * (size_t)job.wide * sizeof(double) +
                                (z == NULL ? (size_t)n * (size_t)job.wide * sizeof(T) : 0));
}

#undef TOP_SHIFT
#undef STREAM_T
#undef FN
