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
 * in two phases, agent by agent (choco_pipelined). Phase 1 reads an agent's z and hat
 * and adds q to hat in place, the row still in cache: top-k selects its kept entries
 * (a radix selection, no sort) and adds them; qsgd and sign sum the row's norm, then
 * read z and hat again, from cache, and add q (no per-entry code is written and read
 * back). Phase 2 of an agent runs as soon as its neighbours' phase 1 has, while their
 * new hat and its own z are still in cache: it recomputes s = sum_o w_o hat[(i + o)
 * mod n] in float64 (S = W X_hat is what CHOCO keeps; not reading S saves 8 bytes per
 * entry, and S carries no accumulated rounding) and writes s and the output by
 * non-temporal stores. No one needs an old hat once its agent's phase 1 has run, so
 * the numbers depend neither on the threads nor on the order of the agents.
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

/* Phase 2's end for one agent of a float state over m columns, its x_hat (mine)
   already updated: s = sum_q w_q term_q (float64, the stencil's terms in order: w_0 t_0,
   then + w_q t_q), the output z + gamma (float)(s - x_hat), s and the output written.
   With AVX2 and s and the output aligned alike, 8 columns at a time, each stored by a
   non-temporal store straight from registers (no buffer of s or of the output);
   returns the columns done: all, or none (then the caller's loops run, to the same
   numbers). */
#if defined(__AVX2__)
static inline void finish_column_f32(int64_t j, int64_t terms, const double *const *term,
                                     const double *w, const double *restrict mine,
                                     const float *restrict z, float gamma, double *restrict s,
                                     float *restrict out) {
    double acc = w[0] * term[0][j];
    for (int64_t q = 1; q < terms; q++) acc += w[q] * term[q][j];
    out[j] = z[j] + gamma * (float)(acc - mine[j]);
    s[j] = acc;
}
#endif

static int64_t finish_f32(int64_t m, int64_t terms, const double *const *term,
                          const double *w, const double *restrict mine,
                          const float *restrict z, float gamma, double *restrict s,
                          float *restrict out) {
#if defined(__AVX2__)
    const int64_t head = (int64_t)((32 - ((uintptr_t)out & 31)) & 31) / 4;
    if (((uintptr_t)out & 3) || ((uintptr_t)(s + head) & 31)) return 0;
    const __m256 g = _mm256_set1_ps(gamma);
    int64_t j = 0;
    for (; j < head && j < m; j++) finish_column_f32(j, terms, term, w, mine, z, gamma, s, out);
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
        _mm256_stream_pd(s + j, lo);
        _mm256_stream_pd(s + j + 4, hi);
        _mm256_stream_ps(out + j, _mm256_add_ps(_mm256_loadu_ps(z + j), _mm256_mul_ps(g, diff)));
    }
    for (; j < m; j++) finish_column_f32(j, terms, term, w, mine, z, gamma, s, out);
    return m;
#else
    (void)m, (void)terms, (void)term, (void)w, (void)mine, (void)z, (void)gamma, (void)s,
        (void)out;
    return 0;
#endif
}

/* qsgd's x_hat += q for the first columns of a chunk of a float state (z, x_hat there,
   entry j's hash index a + j): 8 columns at a time with AVX2, where the levels fit a
   table of 16 (qsgd of up to 4 bits). The same numbers as add_q's loop, with fewer
   conversions between float and double, which bound that loop: the uniform h 2^-32 is
   2^20 + h 2^-32 (exact in a double's 52 bits, h in the low ones) less 2^20, and the
   magnitude (float)(level unit) is looked up in a table of the row's 16 values.
   Returns the columns done (the caller's loop does the rest). */
#if defined(__AVX2__)
static inline __m256i mix_x8(__m256i x) {
    x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
    x = _mm256_mullo_epi32(x, _mm256_set1_epi32(0x7feb352d));
    x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 15));
    x = _mm256_mullo_epi32(x, _mm256_set1_epi32(0x2c1b3c6d));
    return _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
}

static inline __m256d uniform_x4(__m128i h) {
    const __m256i bits = _mm256_or_si256(_mm256_cvtepu32_epi64(h),
                                         _mm256_set1_epi64x(0x4130000000000000LL));
    return _mm256_sub_pd(_mm256_castsi256_pd(bits), _mm256_set1_pd(0x1p20));
}
#endif

static int64_t qsgd_add_f32(int64_t m, int64_t a, uint32_t lo, uint32_t hi, double scale,
                            double unit, int32_t top, const float *restrict z,
                            double *restrict hat) {
#if defined(__AVX2__)
    if (top > 15) return 0;
    float table[16];
    for (int l = 0; l < 16; l++) table[l] = (float)((double)(l < top ? l : top) * unit);
    const __m256 low = _mm256_loadu_ps(table), high = _mm256_loadu_ps(table + 8);
    const __m256 sign = _mm256_set1_ps(-0.0f), zero = _mm256_setzero_ps();
    const __m256d sc = _mm256_set1_pd(scale);
    const __m256i klo = _mm256_set1_epi32((int32_t)lo), khi = _mm256_set1_epi32((int32_t)hi);
    const __m256i cap = _mm256_set1_epi32(top), eight = _mm256_set1_epi32(8);
    __m256i index = _mm256_add_epi32(_mm256_set1_epi32((int32_t)a),
                                     _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    int64_t j = 0;
    for (; j + 8 <= m; j += 8, index = _mm256_add_epi32(index, eight)) {
        const __m256 zz = _mm256_loadu_ps(z + j);
        const __m256d hlo = _mm256_loadu_pd(hat + j), hhi = _mm256_loadu_pd(hat + j + 4);
        const __m256 d = _mm256_set_m128(
            _mm256_cvtpd_ps(_mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(zz, 1)), hhi)),
            _mm256_cvtpd_ps(_mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(zz)), hlo)));
        const __m256 size = _mm256_andnot_ps(sign, d);
        const __m256i h = mix_x8(_mm256_xor_si256(mix_x8(_mm256_xor_si256(index, klo)), khi));
        const __m256d vlo = _mm256_add_pd(
            _mm256_mul_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(size)), sc),
            uniform_x4(_mm256_castsi256_si128(h)));
        const __m256d vhi = _mm256_add_pd(
            _mm256_mul_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(size, 1)), sc),
            uniform_x4(_mm256_extracti128_si256(h, 1)));
        const __m256i level = _mm256_min_epi32(
            _mm256_set_m128i(_mm256_cvttpd_epi32(vhi), _mm256_cvttpd_epi32(vlo)), cap);
        __m256 q = _mm256_blendv_ps(_mm256_permutevar8x32_ps(low, level),
                                    _mm256_permutevar8x32_ps(high, level),
                                    _mm256_castsi256_ps(_mm256_slli_epi32(level, 28)));
        q = _mm256_xor_ps(q, _mm256_and_ps(_mm256_cmp_ps(d, zero, _CMP_LT_OQ), sign));
        _mm256_storeu_pd(hat + j, _mm256_add_pd(hlo, _mm256_cvtps_pd(_mm256_castps256_ps128(q))));
        _mm256_storeu_pd(hat + j + 4,
                         _mm256_add_pd(hhi, _mm256_cvtps_pd(_mm256_extractf128_ps(q, 1))));
    }
    return j;
#else
    (void)m, (void)a, (void)lo, (void)hi, (void)scale, (void)unit, (void)top, (void)z, (void)hat;
    return 0;
#endif
}

static int64_t qsgd_add_f64(int64_t m, int64_t a, uint32_t lo, uint32_t hi, double scale,
                            double unit, int32_t top, const double *restrict z,
                            double *restrict hat) {
    (void)m, (void)a, (void)lo, (void)hi, (void)scale, (void)unit, (void)top, (void)z, (void)hat;
    return 0;
}

/* finish_f32's counterpart for double states: the caller's loops do it all. */
static int64_t finish_f64(int64_t m, int64_t terms, const double *const *term,
                          const double *w, const double *restrict mine,
                          const double *restrict z, double gamma, double *restrict s,
                          double *restrict out) {
    (void)m, (void)terms, (void)term, (void)w, (void)mine, (void)z, (void)gamma, (void)s,
        (void)out;
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
    double *units;        /* qsgd, sign: one per row */
    double *scales;       /* qsgd: levels / norm per row (units' second half) */
    const int64_t *offsets;
    const double *weights; /* S = W X_hat in float64 */
    const T *x, *g;        /* z = x - alpha g where z is NULL */
    T alpha;
    int64_t reach;          /* the farthest neighbour, in agents either way */
    unsigned char *applied; /* the agents whose phase 2 has run */
    int64_t wide;           /* columns of choco_rest's chunk */
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
   in it (candidates); the threshold refined over the candidates only; x_hat += d at
   every kept entry (the row still in cache). */
static void FN(top_k_row)(const struct FN(choco_job) *job, int64_t row, const uint32_t *pack,
                          T *restrict zbuf) {
    const int64_t k = job->k;
    double *restrict hat = job->hat + row * k;
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
    for (int64_t p = 0; p < ns; p++) hat[sure[p]] += (double)d[sure[p]];
    for (int64_t c = 0; c < nc; c++) { /* ties to the lowest indices: cand ascends */
        const U key = FN(key)(d[cand[c]]);
        if (key > t || (key == t && ties > 0)) hat[cand[c]] += (double)d[cand[c]];
        ties -= key == t;
    }
}

/* x_hat += q over columns [a, a + m) of one row (index row) of k for qsgd and sign,
   with z there, in place: q from z - x_hat (the numbers the row's unit was summed
   from), the same q as decentopt.compression's. */
static void FN(add_q)(const struct FN(choco_job) *job, int64_t row, int64_t a, int64_t m,
                      const T *restrict z, double *restrict hat) {
    const double unit = job->units[row];
    if (job->op == SIGN) {
        for (int64_t j = 0; j < m; j++) {
            const T d = (T)((double)z[j] - hat[j]);
            hat[j] += (double)((T)unit * (T)(1 - 2 * (d < 0)));
        }
        return;
    }
    const double scale = job->scales[row];
    const uint32_t lo = (uint32_t)job->keys[row], hi = (uint32_t)(job->keys[row] >> 32);
    const int32_t top = (int32_t)job->levels;
    const int64_t done = CAT(qsgd_add, SUFFIX)(m, a, lo, hi, scale, unit, top, z, hat);
    for (int64_t j = done; j < m; j++) { /* |d| scale + u >= 0: truncation floors */
        const T d = (T)((double)z[j] - hat[j]);
        const uint32_t h = FN(mix)(FN(mix)((uint32_t)(a + j) ^ lo) ^ hi);
        const double u = ((double)(int32_t)(h ^ 0x80000000U) + 0x1p31) * 0x1p-32;
        const int32_t l = (int32_t)(fabs((double)d) * scale + u);
        const int32_t level = l > top ? top : l;
        hat[j] += (double)((T)((double)level * unit) * (T)(1 - 2 * (d < 0)));
    }
}

/* Phase 1 for one agent: each row's q = Q(z - x_hat) added to x_hat in place, while its
   z and x_hat are in cache. Top-k selects in cache and adds its kept entries; qsgd and
   sign sum the row's norm first (its unit, and qsgd's scale), then read z and x_hat
   again, from cache, and add q (no per-entry code is written and read back). S is
   recomputed from the new x_hat, so no one reads the old one after this. */
static void FN(compress_agent)(const struct FN(choco_job) *job, int64_t agent,
                               const uint32_t *pack, T *restrict zbuf) {
    const int64_t k = job->k, rows = job->D / k;
    for (int64_t row = agent * rows; row < (agent + 1) * rows; row++) {
        if (job->op == TOP_K) {
            FN(top_k_row)(job, row, pack, zbuf);
            continue;
        }
        const double sum =
            FN(difference)(job, row * k, job->hat + row * k, k, job->op == QSGD, zbuf);
        if (job->op == SIGN) {
            job->units[row] = (double)(T)(sum / (double)k);
        } else {
            const double norm = (double)(T)sqrt(sum);
            job->units[row] = norm / job->per_unit;
            job->scales[row] = job->levels / (norm > 0 ? norm : 1.0);
        }
        for (int64_t a = 0; a < k; a += CHUNK) {
            const int64_t m = k - a < CHUNK ? k - a : CHUNK;
            FN(add_q)(job, row, a, m, FN(z_at)(job, row * k + a, m, zbuf), job->hat + row * k + a);
        }
    }
}

/* Phase 2 for one agent over columns [a, a + m) of its row r (m <= CHUNK), once its
   neighbours' x_hat are updated: s = W x_hat (the stencil's terms in order, float64
   weights: S = W X_hat exactly as CHOCO keeps it, without reading S), and the
   output. */
static void FN(mix_hats)(const struct FN(choco_job) *job, int64_t agent, int64_t r, int64_t a,
                         int64_t m, T *restrict zbuf) {
    const int64_t n = job->n, D = job->D, at = r * job->k + a, c0 = agent * D + at;
    const double *term[MAX_TERMS];
    for (int64_t q = 0; q < job->terms; q++)
        term[q] = job->hat + (agent + job->offsets[q]) % n * D + at;
    const double *restrict mine = job->hat + c0;
    const T *restrict z = FN(z_at)(job, c0, m, zbuf);
    if (CAT(finish, SUFFIX)(m, job->terms, term, job->weights, mine, z, job->gamma,
                            job->s + c0, job->out + c0) == m)
        return;
    double acc[CHUNK];
    for (int64_t j = 0; j < m; j++) acc[j] = job->weights[0] * term[0][j];
    for (int64_t q = 1; q < job->terms; q++) {
        const double *restrict t = term[q];
        const double w = job->weights[q];
        for (int64_t j = 0; j < m; j++) acc[j] += w * t[j];
    }
    T result[CHUNK];
    for (int64_t j = 0; j < m; j++) result[j] = z[j] + job->gamma * (T)(acc[j] - mine[j]);
    stream_f64(job->s + c0, acc, m);
    STREAM_T(job->out + c0, result, m);
}

/* The two phases agent by agent over agents [first, last): phase 2 of an agent runs,
   over all its rows, as soon as phase 1 has run for all its neighbours, that is right
   after phase 1 of the agent reach places ahead, while its x, g and new x_hat and its
   neighbours' are still in the last-level cache (on ring(32), 10^5 float32 per agent,
   two threads: 0.82x the time of the previous release's round for top-k 1/10, which
   kept S by adding the neighbours' kept entries, 0.63-0.75x for sign, which read x, g
   and x_hat twice from memory). Agents with a neighbour outside the range (for
   exponential graphs: all) are left to choco_rest. */
static void FN(choco_pipelined)(const void *shared, int64_t first, int64_t last, void *scratch) {
    const struct FN(choco_job) *job = shared;
    const int64_t reach = job->reach, k = job->k, rows = job->D / k;
    uint32_t pack[256]; /* top-k: a mask's set lanes, 4 bits each, lowest first */
    for (unsigned mask = 0; job->op == TOP_K && mask < 256; mask++) {
        pack[mask] = 0;
        for (unsigned lane = 0, at = 0; lane < 8; lane++)
            if (mask >> lane & 1) pack[mask] |= lane << (4 * at++);
    }
    for (int64_t i = first; i < last; i++) {
        FN(compress_agent)(job, i, pack, scratch);
        const int64_t j = i - reach; /* its farthest neighbour ahead is i */
        if (j - reach < first) continue;
        for (int64_t r = 0; r < rows; r++)
            for (int64_t a = 0; a < k; a += CHUNK)
                FN(mix_hats)(job, j, r, a, k - a < CHUNK ? k - a : CHUNK, scratch);
        job->applied[j] = 1;
    }
}

/* Phase 2 of the agents choco_pipelined left, once every x_hat is updated: tasks
   [first, last) = (row segment, chunk of columns), each chunk of all agents' x_hat
   (wide columns) read once from memory and kept in cache while the agents' s that
   need it are formed. */
static void FN(choco_rest)(const void *shared, int64_t first, int64_t last, void *scratch) {
    const struct FN(choco_job) *job = shared;
    const int64_t k = job->k, wide = job->wide, chunks = (k + wide - 1) / wide;
    for (int64_t task = first; task < last; task++) {
        const int64_t r = task / chunks, a = task % chunks * wide;
        const int64_t m = k - a < wide ? k - a : wide;
        for (int64_t i = 0; i < job->n; i++)
            if (!job->applied[i]) FN(mix_hats)(job, i, r, a, m, scratch);
    }
}

int EXPORT(decentopt_choco)(int op, int64_t n, int64_t D, int64_t k, int64_t kept,
                            double levels, double per_unit, const T *z, double *hat, double *s,
                            T *out, T gamma, const uint64_t *keys, double *units,
                            int64_t terms, const int64_t *offsets, const double *weights,
                            const T *x, const T *g, T alpha, int threads) {
    if (op < TOP_K || op > SIGN || terms < 1 || terms > MAX_TERMS || n < 0 || k < 1 ||
        D % k || (op == TOP_K && (kept < 1 || kept > k)) || k > INT32_MAX ||
        (z == NULL && (x == NULL || g == NULL)))
        return 1;
    struct FN(choco_job) job = {op,    n,       D,     k,     kept,    terms,
                                levels, per_unit, z,    hat,   s,       out,
                                gamma, keys,    units, units + n * (D / k), offsets, weights,
                                x,     g,       alpha, 0,     NULL,    0};
    const size_t scratch = op == TOP_K ? (size_t)(k + CHUNK) * sizeof(T) + k * sizeof(U) +
                                             2 * (k + 8) * sizeof(int32_t)
                                       : CHUNK * sizeof(T);
    for (int64_t q = 0; n > 0 && q < terms; q++) { /* o ahead is n - o behind */
        const int64_t o = offsets[q] % n, apart = o <= n / 2 ? o : n - o;
        if (apart > job.reach) job.reach = apart;
    }
    job.applied = calloc((size_t)n + 1, 1); /* + 1: never a request for 0 bytes */
    if (job.applied == NULL) return 2;
    int failed = run_parallel(FN(choco_pipelined), &job, n, threads, scratch);
    /* choco_rest's chunk of all n agents' x_hat in 256 KB */
    job.wide = n > 0 && 32768 / n < CHUNK ? (32768 / n > 8 ? 32768 / n : 8) : CHUNK;
    if (!failed)
        failed = run_parallel(FN(choco_rest), &job, D / k * ((k + job.wide - 1) / job.wide),
                              threads, CHUNK * sizeof(T));
    free(job.applied);
    return 2 * failed;
}
#undef TOP_SHIFT
#undef STREAM_T
#undef FN
