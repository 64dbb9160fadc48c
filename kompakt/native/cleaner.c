/*
 * The cleaner's per-batch work (see kompakt/cleaner/batch_ops.py, offset_map.py, cleaner.py).
 *
 * Plain C, no Python headers: part of the library kompakt/native/__init__.py compiles and loads
 * with ctypes. Every function works on the *records* bytes of one batch (the batch itself when
 * uncompressed, starting at byte 61; the decompressed payload otherwise) and on the offset map's
 * buffer, and must give exactly the results of the Python code it replaces:
 *   - MD5 of the key bytes (RFC 1321), the same 16 bytes as hashlib.md5(key).digest();
 *   - map slot = big-endian uint64 of digest[0:8] mod slots, step = 1 + big-endian uint64 of
 *     digest[8:16] mod (slots - 1); a slot of 24 zero bytes is empty; offsets stored big-endian;
 *   - the retain rules listed in batch_ops.py's docstring.
 * Bounds: every read is checked against the buffer length; a record that does not fit, or bytes
 * left over after the batch's `count` records, are reported as corrupt (-1), never read past.
 */
#include "common.h"

static const uint32_t MD5_K[64] = {
    0xd76aa478, 0xe8c7b756, 0x242070db, 0xc1bdceee, 0xf57c0faf, 0x4787c62a, 0xa8304613, 0xfd469501,
    0x698098d8, 0x8b44f7af, 0xffff5bb1, 0x895cd7be, 0x6b901122, 0xfd987193, 0xa679438e, 0x49b40821,
    0xf61e2562, 0xc040b340, 0x265e5a51, 0xe9b6c7aa, 0xd62f105d, 0x02441453, 0xd8a1e681, 0xe7d3fbc8,
    0x21e1cde6, 0xc33707d6, 0xf4d50d87, 0x455a14ed, 0xa9e3e905, 0xfcefa3f8, 0x676f02d9, 0x8d2a4c8a,
    0xfffa3942, 0x8771f681, 0x6d9d6122, 0xfde5380c, 0xa4beea44, 0x4bdecfa9, 0xf6bb4b60, 0xbebfbc70,
    0x289b7ec6, 0xeaa127fa, 0xd4ef3085, 0x04881d05, 0xd9d4d039, 0xe6db99e5, 0x1fa27cf8, 0xc4ac5665,
    0xf4292244, 0x432aff97, 0xab9423a7, 0xfc93a039, 0x655b59c3, 0x8f0ccc92, 0xffeff47d, 0x85845dd1,
    0x6fa87e4f, 0xfe2ce6e0, 0xa3014314, 0x4e0811a1, 0xf7537e82, 0xbd3af235, 0x2ad7d2bb, 0xeb86d391};
static const uint8_t MD5_R[64] = {7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22,
                                  5, 9,  14, 20, 5, 9,  14, 20, 5, 9,  14, 20, 5, 9,  14, 20,
                                  4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23,
                                  6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21};

#define ROTL(x, c) (((x) << (c)) | ((x) >> (32 - (c))))

/*
 * MD5's 64 rounds on the state A, B, C, D and the message words M[16] in scope, in any type T with
 * C's integer operators: uint32_t for one block (md5_block), the eight-lane vector v8u for eight
 * (md5_x8_body). One text for both, so they cannot drift apart. Fully unrolled by the compiler:
 * the round selection and message index fold to constants.
 */
#define MD5_ROUNDS(T)                                                                                  \
    _Pragma("GCC unroll 64") for (int i = 0; i < 64; i++) {                                          \
        T F;                                                                                           \
        int g;                                                                                         \
        if (i < 16) {                                                                                  \
            F = (B & C) | (~B & D);                                                                    \
            g = i;                                                                                     \
        } else if (i < 32) {                                                                           \
            F = (D & B) | (~D & C);                                                                    \
            g = (5 * i + 1) & 15;                                                                      \
        } else if (i < 48) {                                                                           \
            F = B ^ C ^ D;                                                                             \
            g = (3 * i + 5) & 15;                                                                      \
        } else {                                                                                       \
            F = C ^ (B | ~D);                                                                          \
            g = (7 * i) & 15;                                                                          \
        }                                                                                              \
        F = F + A + MD5_K[i] + M[g];                                                                   \
        A = D;                                                                                         \
        D = C;                                                                                         \
        C = B;                                                                                         \
        B = B + ROTL(F, MD5_R[i]);                                                                     \
    }

static void md5_block(uint32_t s[4], const uint8_t *p) {
    uint32_t M[16];
    for (int i = 0; i < 16; i++)
        M[i] = (uint32_t)p[4 * i] | ((uint32_t)p[4 * i + 1] << 8) | ((uint32_t)p[4 * i + 2] << 16) |
               ((uint32_t)p[4 * i + 3] << 24);
    uint32_t A = s[0], B = s[1], C = s[2], D = s[3];
    MD5_ROUNDS(uint32_t);
    s[0] += A;
    s[1] += B;
    s[2] += C;
    s[3] += D;
}

void km_md5(const uint8_t *msg, int64_t len, uint8_t out[16]) {
    uint32_t s[4] = {0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476};
    int64_t full = len / 64;
    for (int64_t i = 0; i < full; i++) md5_block(s, msg + 64 * i);
    uint8_t tail[128];
    int64_t rem = len - full * 64;
    memcpy(tail, msg + full * 64, (size_t)rem);
    tail[rem] = 0x80;
    int64_t total = (rem < 56) ? 64 : 128;
    memset(tail + rem + 1, 0, (size_t)(total - rem - 1));
    uint64_t bits = (uint64_t)len * 8;
    for (int i = 0; i < 8; i++) tail[total - 8 + i] = (uint8_t)(bits >> (8 * i));
    md5_block(s, tail);
    if (total == 128) md5_block(s, tail + 64);
    for (int i = 0; i < 4; i++) {
        out[4 * i] = (uint8_t)s[i];
        out[4 * i + 1] = (uint8_t)(s[i] >> 8);
        out[4 * i + 2] = (uint8_t)(s[i] >> 16);
        out[4 * i + 3] = (uint8_t)(s[i] >> 24);
    }
}

/*
 * Eight MD5s at once for keys of at most 55 bytes (one 64-byte block each), in GCC vector
 * extensions: eight 32-bit lanes. The one body is compiled three times and picked once by what the
 * CPU has: AVX-512VL (the rotates become one vprold, the round functions one vpternlogd: about
 * twice AVX2's speed), AVX2, or the baseline (two SSE2 halves). Gives the same digests as km_md5.
 */
typedef uint32_t v8u __attribute__((vector_size(32)));

static inline __attribute__((always_inline)) void md5_x8_body(const uint8_t *const msg[8], const int64_t len[8],
                                                              uint8_t out[8][16]) {
    uint32_t W[16][8];
    for (int j = 0; j < 8; j++) {
        uint8_t blk[64];
        int64_t n = len[j];
        memcpy(blk, msg[j], (size_t)n);
        blk[n] = 0x80;
        memset(blk + n + 1, 0, (size_t)(55 - n));
        uint64_t bits = (uint64_t)n * 8;
        for (int i = 0; i < 8; i++) blk[56 + i] = (uint8_t)(bits >> (8 * i));
        for (int i = 0; i < 16; i++)
            W[i][j] = (uint32_t)blk[4 * i] | ((uint32_t)blk[4 * i + 1] << 8) | ((uint32_t)blk[4 * i + 2] << 16) |
                      ((uint32_t)blk[4 * i + 3] << 24);
    }
    v8u M[16];
    for (int i = 0; i < 16; i++) memcpy(&M[i], W[i], 32);
    v8u A = (v8u){0} + 0x67452301u, B = (v8u){0} + 0xefcdab89u, C = (v8u){0} + 0x98badcfeu,
        D = (v8u){0} + 0x10325476u;
    v8u A0 = A, B0 = B, C0 = C, D0 = D;
    MD5_ROUNDS(v8u);
    A += A0;
    B += B0;
    C += C0;
    D += D0;
    uint32_t r[4][8];
    memcpy(r[0], &A, 32);
    memcpy(r[1], &B, 32);
    memcpy(r[2], &C, 32);
    memcpy(r[3], &D, 32);
    for (int j = 0; j < 8; j++)
        for (int w = 0; w < 4; w++) {
            uint32_t x = r[w][j];
            out[j][4 * w] = (uint8_t)x;
            out[j][4 * w + 1] = (uint8_t)(x >> 8);
            out[j][4 * w + 2] = (uint8_t)(x >> 16);
            out[j][4 * w + 3] = (uint8_t)(x >> 24);
        }
}

static void md5_x8_base(const uint8_t *const msg[8], const int64_t len[8], uint8_t out[8][16]) {
    md5_x8_body(msg, len, out);
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2"))) static void md5_x8_avx2(const uint8_t *const msg[8], const int64_t len[8],
                                                       uint8_t out[8][16]) {
    md5_x8_body(msg, len, out);
}

__attribute__((target("avx512f,avx512vl"))) static void md5_x8_avx512(const uint8_t *const msg[8],
                                                                      const int64_t len[8], uint8_t out[8][16]) {
    md5_x8_body(msg, len, out);
}
#endif

typedef void (*md5_x8_fn)(const uint8_t *const[8], const int64_t[8], uint8_t[8][16]);
static md5_x8_fn md5_x8_impl = 0;

static void md5_x8(const uint8_t *const msg[8], const int64_t len[8], uint8_t out[8][16]) {
    if (!md5_x8_impl) {
        md5_x8_fn f = md5_x8_base;
#if defined(__x86_64__) && defined(__GNUC__)
        __builtin_cpu_init();
        if (__builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512f"))
            f = md5_x8_avx512;
        else if (__builtin_cpu_supports("avx2"))
            f = md5_x8_avx2;
#endif
        md5_x8_impl = f;
    }
    md5_x8_impl(msg, len, out);
}

/* tests: force one variant (1 baseline, 2 AVX2, 3 AVX-512VL; 0 back to the CPU's pick);
   returns 0 when this CPU cannot run it (nothing changed) */
int64_t km_md5_variant(int64_t which) {
    md5_x8_fn f = 0;
    if (which == 1) f = md5_x8_base;
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (which == 2 && __builtin_cpu_supports("avx2")) f = md5_x8_avx2;
    if (which == 3 && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512f")) f = md5_x8_avx512;
#endif
    if (which == 0 || f) {
        md5_x8_impl = f;
        return 1;
    }
    return 0;
}

/* digests of n keys (n <= 32): short keys eight at a time, long ones one by one */
static void md5_many(int n, const uint8_t *const key[], const int64_t klen[], uint8_t dg[][16]) {
    const uint8_t *lm[8];
    int64_t ll[8];
    int li[8];
    uint8_t lo[8][16];
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (klen[i] > 55) {
            km_md5(key[i], klen[i], dg[i]);
            continue;
        }
        lm[m] = key[i];
        ll[m] = klen[i];
        li[m++] = i;
        if (m == 8) {
            md5_x8(lm, ll, lo);
            for (int j = 0; j < 8; j++) memcpy(dg[li[j]], lo[j], 16);
            m = 0;
        }
    }
    if (m >= 3) {
        for (int j = m; j < 8; j++) {
            lm[j] = lm[0];
            ll[j] = ll[0];
        }
        md5_x8(lm, ll, lo);
        for (int j = 0; j < m; j++) memcpy(dg[li[j]], lo[j], 16);
    } else {
        for (int j = 0; j < m; j++) km_md5(lm[j], ll[j], dg[li[j]]);
    }
}

void km_md5_many(int64_t n, const uint8_t *keys, const int64_t *lens, uint8_t *out) {
    /* test entry: n <= 32 keys stored back to back */
    const uint8_t *kp[32];
    int64_t kl[32];
    uint8_t dg[32][16];
    int64_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        kp[i] = keys + at;
        kl[i] = lens[i];
        at += lens[i];
    }
    md5_many((int)n, kp, kl, dg);
    memcpy(out, dg, (size_t)(16 * n));
}

static inline int is_empty(const uint8_t *e) { return (ld64(e) | ld64(e + 8) | ld64(e + 16)) == 0; }

static inline int same_digest(const uint8_t *e, const uint8_t *dg) {
    return ld64(e) == ld64(dg) && ld64(e + 8) == ld64(dg + 8);
}

static inline void prefetch_slot(const uint8_t *map, int64_t slots, const uint8_t *dg) {
    const uint8_t *a = map + (be64(dg) % (uint64_t)slots) * 24;
#if defined(__x86_64__)
    /* an explicit instruction: GCC drops __builtin_prefetch here (its address is never read) */
    __asm__ volatile("prefetcht0 %0" : : "m"(*(const volatile uint8_t *)a));
#else
    __builtin_prefetch(a);
#endif
}

/* lookup: offset of the digest, or -1 */
static int64_t map_get(const uint8_t *map, int64_t slots, const uint8_t dg[16], int64_t *probes) {
    uint64_t i = be64(dg) % (uint64_t)slots;
    uint64_t step = 0;
    for (;;) {
        (*probes)++;
        const uint8_t *e = map + i * 24;
        if (same_digest(e, dg)) return (int64_t)be64(e + 16);
        if (is_empty(e)) return -1;
        if (!step) step = 1 + be64(dg + 8) % (uint64_t)(slots - 1);
        i += step;
        if (i >= (uint64_t)slots) i -= (uint64_t)slots;
    }
}

/* insert or overwrite; returns 1 if a new slot was taken */
static int map_put(uint8_t *map, int64_t slots, const uint8_t dg[16], int64_t offset, int64_t *probes) {
    uint64_t i = be64(dg) % (uint64_t)slots;
    uint64_t step = 0;
    for (;;) {
        (*probes)++;
        uint8_t *e = map + i * 24;
        if (same_digest(e, dg)) {
            put_be64(e + 16, offset);
            return 0;
        }
        if (is_empty(e)) {
            memcpy(e, dg, 16);
            put_be64(e + 16, offset);
            return 1;
        }
        if (!step) step = 1 + be64(dg + 8) % (uint64_t)(slots - 1);
        i += step;
        if (i >= (uint64_t)slots) i -= (uint64_t)slots;
    }
}

void km_map_put(uint8_t *map, int64_t slots, const uint8_t *dg, int64_t offset, int64_t *io) {
    io[0] += map_put(map, slots, dg, offset, &io[3]);
}

int64_t km_map_get(const uint8_t *map, int64_t slots, const uint8_t *dg, int64_t *io) {
    return map_get(map, slots, dg, &io[3]);
}

/*
 * Pass 1 over one batch. io: [0] map size, [1] latest offset, [2] keyless count (added to),
 * [3] probes (added to), [4] records read (set). Returns 0, 1 when the map reached `limit` before
 * a record (records before it were put), -1 when the bytes are not `count` records.
 */
int64_t km_index(const uint8_t *d, int64_t end, int64_t p, int64_t count, int64_t base, int64_t start_offset,
                 uint8_t *map, int64_t slots, int64_t limit, int64_t *io) {
    /* records are parsed and hashed CHUNK at a time and their first slots prefetched before the
       puts, which then run in record order (so later offsets still overwrite earlier ones) */
    enum { CHUNK = 32 };
    uint8_t dg[CHUNK][16];
    int64_t offs[CHUNK];
    const uint8_t *kp[CHUNK];
    int64_t kl_[CHUNK];
    int64_t n = 0;
    while (n < count) {
        int m = 0;
        int64_t first = n;
        for (; n < count && m < CHUNK; n++) {
            int64_t ln, td, od, kl;
            if (rd_varint(d, end, &p, &ln) || ln < 1) return -1;
            int64_t rec_end = p + ln;
            if (rec_end > end) return -1;
            int64_t q = p + 1;
            if (rd_varint(d, rec_end, &q, &td) || rd_varint(d, rec_end, &q, &od) ||
                rd_varint(d, rec_end, &q, &kl))
                return -1;
            if (kl >= 0) {
                if (q + kl > rec_end) return -1;
                int64_t off = base + od;
                if (off >= start_offset) {
                    kp[m] = d + q;
                    kl_[m] = kl;
                    offs[m++] = off;
                }
            } else {
                io[2]++;
            }
            p = rec_end;
        }
        md5_many(m, kp, kl_, dg);
        for (int i = 0; i < m; i++) prefetch_slot(map, slots, dg[i]);
        for (int i = 0; i < m; i++) {
            if (io[0] >= limit) {
                io[4] = first + i;
                return 1;
            }
            io[0] += map_put(map, slots, dg[i], offs[i], &io[3]);
            if (offs[i] > io[1]) io[1] = offs[i];
        }
    }
    if (p != end) return -1; /* bytes left over after `count` records: Kafka rejects the batch too */
    io[4] = count;
    return 0;
}

/* an exact offset set (the pipeline's exact compaction): int64 base, int64 nbits, then the bits;
   an offset outside [base, base + nbits) is not in it */
static inline int in_offset_set(const uint8_t *set, int64_t off) {
    int64_t base, nbits;
    memcpy(&base, set, 8);
    memcpy(&nbits, set + 8, 8);
    uint64_t d = (uint64_t)off - (uint64_t)base;
    if (nbits < 0 || d >= (uint64_t)nbits) return 0;
    return (set[16 + (d >> 3)] >> (d & 7)) & 1;
}

/*
 * Pass 2 over one batch: copy the retained records to `out` (at least as large as the records).
 * `map` is the MD5 offset map (slots > 0) or, with slots < 0, an exact offset set.
 * io out: [0] kept, [1] tombstones kept, [2] keyless dropped, [3] max timestamp delta of kept
 * records (INT64_MIN if none), [4] bytes written to out, [5] probes (added to).
 * Returns 0, or -1 when the bytes are not `count` records.
 */
int64_t km_filter(const uint8_t *d, int64_t end, int64_t p, int64_t count, int64_t base, const uint8_t *map,
                  int64_t slots, int64_t latest, int64_t horizon_passed, uint8_t *out, int64_t *io) {
    int exact = slots < 0; /* map is an exact offset set (in_offset_set): keep a keyed record iff in it */
    enum { CHUNK = 32 };
    uint8_t dg[CHUNK][16];
    int64_t starts[CHUNK], ends[CHUNK], tds[CHUNK], offs[CHUNK];
    int8_t kind[CHUNK]; /* 0 keyless, 1 keyed, 2 past the mapped range */
    int8_t tomb[CHUNK];
    const uint8_t *kp[CHUNK];
    int64_t kl_[CHUNK];
    int hashed[CHUNK];
    int64_t kept = 0, tombs = 0, keyless = 0, outlen = 0, maxtd = INT64_MIN;
    int64_t n = 0;
    while (n < count) {
        int m = 0, h = 0;
        for (; n < count && m < CHUNK; n++, m++) {
            int64_t ln, td, od, kl, vl;
            starts[m] = p;
            if (rd_varint(d, end, &p, &ln) || ln < 1) return -1;
            int64_t rec_end = p + ln;
            if (rec_end > end) return -1;
            int64_t q = p + 1;
            if (rd_varint(d, rec_end, &q, &td) || rd_varint(d, rec_end, &q, &od) ||
                rd_varint(d, rec_end, &q, &kl))
                return -1;
            int64_t key_at = q;
            if (kl > 0) q += kl;
            if (q > rec_end || rd_varint(d, rec_end, &q, &vl)) return -1;
            ends[m] = rec_end;
            tds[m] = td;
            offs[m] = base + od;
            tomb[m] = vl < 0 && kl >= 0;   /* a tombstone has a key (as the Python seam counts) */
            if (offs[m] > latest) {
                kind[m] = 2;
            } else if (kl < 0) {
                kind[m] = 0;
            } else {
                kind[m] = 1;
                if (!exact) {
                    kp[h] = d + key_at;
                    kl_[h] = kl;
                    hashed[m] = h++;
                }
            }
            p = rec_end;
        }
        if (!exact) {
            md5_many(h, kp, kl_, dg);
            for (int i = 0; i < h; i++) prefetch_slot(map, slots, dg[i]);
        }
        for (int i = 0; i < m; i++) {
            int keep = 0;
            if (kind[i] == 2) {
                keep = 1;
                tombs += tomb[i];
            } else if (kind[i] == 0) {
                keyless++;
            } else if (exact ? in_offset_set(map, offs[i]) : offs[i] >= map_get(map, slots, dg[hashed[i]], &io[5])) {
                if (tomb[i]) {
                    if (!horizon_passed) {
                        keep = 1;
                        tombs++;
                    }
                } else {
                    keep = 1;
                }
            }
            if (keep) {
                memcpy(out + outlen, d + starts[i], (size_t)(ends[i] - starts[i]));
                outlen += ends[i] - starts[i];
                kept++;
                if (tds[i] > maxtd) maxtd = tds[i];
            }
        }
    }
    if (p != end) return -1; /* bytes left over after `count` records */
    io[0] = kept;
    io[1] = tombs;
    io[2] = keyless;
    io[3] = maxtd;
    io[4] = outlen;
    return 0;
}

/* ------------------------------------------------------------------------------------------------
 * Whole-range loops: walk the batches of a segment (mapped in memory) and do the common case in C,
 * returning to Python for a batch that needs it (control or transactional batches, batches whose
 * tombstones need a delete horizon stamped). Compressed batches stay in C with two round trips to
 * Python's codecs: their decompressed records come in a payload table Python fills ahead of the
 * loop (RC_PAYLOAD: fill it from the batch at the position returned; one codec call per batch), and
 * a rebuilt batch that must be compressed is staged (RC_COMPRESS: compress the staged records with
 * the codec in st[22], pass the result back as `pending` on the next call, which writes the batch).
 * Python's codecs, not a C library's, so both seams write the same bytes.
 *
 * The payload table: pl_pos[i] ascending batch positions, pl_ptr[i] / pl_len[i] their records
 * (pl_len < 0: the codec refused the bytes -> RC_PAYLOAD_ERROR at that batch), pl_n entries; the
 * caller's cursor moves past the entries the loop used.
 */
enum { RC_END = 0, RC_FULL = 1, RC_PYTHON = 2, RC_STOP = 3, RC_FLUSH = 4, RC_BUDGET = 5, RC_PAYLOAD = 6,
       RC_COMPRESS = 7, RC_CORRUPT = -1, RC_OVERFLOW = -3, RC_PAYLOAD_ERROR = -4 };

/*
 * Pass 1 over buf[pos, end). io: [0] map size, [1] latest, [2] keyless (+), [3] probes (+),
 * [4] pos (in/out), [5] records read (+), [6] bytes read (+), [7] batches (+), [8] payload cursor.
 * Skips batches ending before start_offset; RC_STOP at the first batch at or past end_offset.
 */
int64_t km_index_range(const uint8_t *buf, int64_t end, int64_t start_offset, int64_t end_offset,
                       uint8_t *map, int64_t slots, int64_t limit, int64_t budget, int64_t *io,
                       const int64_t *pl_pos, const uint8_t *const *pl_ptr, const int64_t *pl_len, int64_t pl_n) {
    int64_t pos = io[4];
    int64_t done = 0;
    int64_t sub[5];
    while (end - pos >= 61) {
        const uint8_t *b = buf + pos;
        int64_t size = (int64_t)be32(b + 8) + 12;
        if (size < 61 || pos + size > end) break;
        int64_t base = (int64_t)be64(b);
        int64_t last = base + be32(b + 23);
        if (last < start_offset) {
            pos += size;
            continue;
        }
        if (base >= end_offset) {
            io[4] = pos;
            return RC_STOP;
        }
        int16_t attrs = be16(b + 21);
        if (attrs & 0x30) {
            io[4] = pos;
            return RC_PYTHON;
        }
        if (km_crc32c(0, b + 21, size - 21) != (uint32_t)be32(b + 17)) {
            io[4] = pos;
            return RC_CORRUPT;
        }
        const uint8_t *rd = b;
        int64_t rlen = size, rp = 61;
        if (attrs & 0x07) {
            int found = find_payload(pos, pl_pos, pl_ptr, pl_len, pl_n, &io[8], &rd, &rlen);
            if (found <= 0) {
                io[4] = pos;
                return found == 0 ? RC_PAYLOAD : RC_PAYLOAD_ERROR;
            }
            rp = 0;
        }
        int64_t count = be32(b + 57);
        sub[0] = io[0];
        sub[1] = io[1];
        sub[2] = 0;
        sub[3] = 0;
        sub[4] = 0;
        int64_t rc = km_index(rd, rlen, rp, count, base, start_offset, map, slots, limit, sub);
        io[0] = sub[0];
        io[1] = sub[1];
        io[2] += sub[2];
        io[3] += sub[3];
        if (rc < 0) {
            io[4] = pos;
            return RC_CORRUPT;
        }
        io[5] += count;
        io[6] += size;
        io[7] += 1;
        if (rc == 1) {
            io[4] = pos;
            return RC_FULL;
        }
        if (last > io[1]) io[1] = last;
        pos += size;
        done += size;
        if (done >= budget) {
            io[4] = pos;
            return RC_BUDGET;
        }
    }
    io[4] = pos;
    return RC_END;
}

static int in_sorted(const int64_t *a, int64_t n, int64_t x) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (a[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && a[lo] == x;
}

/* the index bookkeeping of LogSegment.append for one written batch at st[0] */
static int note_written(int64_t *st, int64_t last, int64_t max_ts, int64_t len, uint8_t *oidx, int64_t ocap,
                        uint8_t *tidx, int64_t tcap) {
    if (max_ts > st[2]) {
        st[2] = max_ts;
        st[3] = last;
    }
    if (st[1] > st[6]) {
        if (st[7] >= ocap || st[8] >= tcap) return -1;
        put_be32(oidx + 8 * st[7], (uint32_t)(last - st[5]));
        put_be32(oidx + 8 * st[7] + 4, (uint32_t)st[0]);
        st[7]++;
        if (st[2] > st[4]) {
            put_be64(tidx + 12 * st[8], st[2]);
            put_be32(tidx + 12 * st[8] + 8, (uint32_t)(st[3] - st[5]));
            st[8]++;
            st[4] = st[2];
        }
        st[1] = 0;
    }
    st[0] += len;
    st[1] += len;
    return 0;
}

static inline void put_be16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

/* a rebuilt batch at h (room for 61 + len bytes): header of the original b, its new count,
   attributes and max timestamp, `len` bytes of records already at h + 61; the CRC last */
static void finish_batch(uint8_t *h, const uint8_t *b, int64_t kept, int64_t attrs, int64_t max_ts, int64_t len) {
    memcpy(h, b, 61);
    put_be32(h + 8, (uint32_t)(49 + len));
    put_be16(h + 21, (uint16_t)attrs);
    put_be64(h + 35, max_ts);
    put_be32(h + 57, (uint32_t)kept);
    put_be32(h + 17, km_crc32c(0, h + 21, 40 + len));
}

/*
 * Pass 2 over buf[st[10], end) into out. st: [0] position in the cleaned segment, [1] bytes since
 * the last index entry, [2] max timestamp so far, [3] its offset, [4] last time-index timestamp,
 * [5] cleaned segment base offset, [6] index.interval.bytes, [7] offset-index entries in oidx,
 * [8] time-index entries in tidx, [9] bytes in out, [10] input position, [11] records read (+),
 * [12] bytes read (+), [13] records written (+), [14] bytes written (+), [15] keyless (+),
 * [16] tombstones kept (+), [17] probes (+), [18] payload cursor, and the batch staged for
 * RC_COMPRESS: [19] its position (-1: none), [20] records kept, [21] max timestamp, [22] its new
 * attributes (the codec to compress with in bits 0-2), [23] bytes staged in `stage`.
 * keep_offsets: sorted last offsets whose batch is kept even if empty (active producers' last
 * batches). upper: a batch ending right before it is kept even if empty. group_horizon: the
 * group-safe horizon offset (rules.py); a batch whose delete horizon passed but which ends at or
 * past it goes to Python (RC_PYTHON), which keeps and counts its tombstones. target_codec: the
 * topic's compression.type for rebuilt batches (-1: each batch keeps its own codec). pending: the
 * staged records compressed (pending_len >= 0), written first.
 */
int64_t km_filter_range(const uint8_t *buf, int64_t end, const uint8_t *map, int64_t slots, int64_t latest,
                        int64_t now_ms, int64_t group_horizon, int64_t upper, const int64_t *keep_offsets,
                        int64_t n_keep,
                        uint8_t *out, int64_t out_cap, uint8_t *oidx, int64_t ocap, uint8_t *tidx, int64_t tcap,
                        int64_t budget, int64_t *st, const int64_t *pl_pos, const uint8_t *const *pl_ptr,
                        const int64_t *pl_len, int64_t pl_n, int64_t target_codec, uint8_t *stage,
                        int64_t stage_cap, const uint8_t *pending, int64_t pending_len) {
    int64_t pos = st[10];
    int64_t done = 0;
    int64_t io[6];
    if (st[19] >= 0) { /* the staged batch, now compressed */
        if (pending_len < 0 || st[19] != pos) return RC_COMPRESS;
        const uint8_t *b = buf + pos;
        int64_t need = 61 + pending_len;
        if (st[9] + need > out_cap || st[7] >= ocap || st[8] >= tcap) return RC_FLUSH;
        int64_t last = (int64_t)be64(b) + be32(b + 23);
        uint8_t *h = out + st[9];
        memcpy(h + 61, pending, (size_t)pending_len);
        finish_batch(h, b, st[20], st[22], st[21], pending_len);
        if (note_written(st, last, st[21], need, oidx, ocap, tidx, tcap)) return RC_CORRUPT;
        st[9] += need;
        st[13] += st[20];
        st[14] += need;
        st[19] = -1;
        pos += (int64_t)be32(b + 8) + 12;
    }
    while (end - pos >= 61) {
        const uint8_t *b = buf + pos;
        int64_t size = (int64_t)be32(b + 8) + 12;
        if (size < 61 || pos + size > end) break;
        int16_t attrs = be16(b + 21);
        if (attrs & 0x30) {
            st[10] = pos;
            return RC_PYTHON;
        }
        if (st[9] + size > out_cap || st[7] >= ocap || st[8] >= tcap) {
            st[10] = pos;
            return RC_FLUSH;
        }
        if (km_crc32c(0, b + 21, size - 21) != (uint32_t)be32(b + 17)) {
            st[10] = pos;
            return RC_CORRUPT;
        }
        int64_t codec = attrs & 0x07;
        int64_t new_codec = target_codec >= 0 ? target_codec : codec;
        const uint8_t *rd = b;
        int64_t rlen = size, rp = 61;
        if (codec) {
            int found = find_payload(pos, pl_pos, pl_ptr, pl_len, pl_n, &st[18], &rd, &rlen);
            if (found <= 0) {
                st[10] = pos;
                return found == 0 ? RC_PAYLOAD : RC_PAYLOAD_ERROR;
            }
            rp = 0;
        }
        /* uncompressed in and out: filter straight into out; else into the stage */
        int direct = codec == 0 && new_codec == 0;
        if (!direct && rlen - rp > stage_cap) {
            st[10] = pos;
            return RC_PYTHON; /* records larger than the stage: the Python path */
        }
        int64_t base = (int64_t)be64(b);
        int64_t last = base + be32(b + 23);
        int64_t base_ts = (int64_t)be64(b + 27);
        int64_t hdr_max_ts = (int64_t)be64(b + 35);
        int64_t pid = (int64_t)be64(b + 43);
        int64_t count = be32(b + 57);
        int has_horizon = (attrs & 0x40) != 0;
        int passed = has_horizon && now_ms >= base_ts;
        if (passed && last >= group_horizon) {
            st[10] = pos;
            return RC_PYTHON; /* tombstones held back by a consumer group: decided in rules.py */
        }
        int retain_empty = (last + 1 == upper) || (pid >= 0 && in_sorted(keep_offsets, n_keep, last));
        uint8_t *dst = direct ? out + st[9] + 61 : stage;
        io[5] = 0;
        int64_t rc = km_filter(rd, rlen, rp, count, base, map, slots, latest, passed, dst, io);
        st[17] += io[5];
        if (rc < 0) {
            st[10] = pos;
            return RC_CORRUPT;
        }
        int64_t kept = io[0], tombs = io[1], keyless = io[2], maxtd = io[3], outlen = io[4];
        if (tombs > 0 && !has_horizon) {
            st[10] = pos;
            return RC_PYTHON; /* the delete horizon is stamped by the Python path */
        }
        if (last - st[5] > 2147483647LL) {
            st[10] = pos;
            return RC_OVERFLOW;
        }
        st[11] += count;
        st[12] += size;
        st[15] += keyless;
        st[16] += tombs;
        if (kept == 0 && !retain_empty) {
            /* nothing left, an already empty batch too: dropped (Kafka's DELETE_EMPTY) */
        } else if (kept == count) { /* nothing removed: the batch byte for byte, whatever target_codec says */
            memcpy(out + st[9], b, (size_t)size);
            if (note_written(st, last, hdr_max_ts, size, oidx, ocap, tidx, tcap)) return RC_CORRUPT;
            st[9] += size;
            st[13] += count;
            st[14] += size;
        } else if (kept > 0 || retain_empty) {
            int64_t max_ts = (kept && !(attrs & 0x08)) ? base_ts + maxtd : hdr_max_ts;
            /* no records left: written uncompressed (a codec bit over nothing is no valid stream) */
            int64_t out_attrs = outlen ? ((attrs & ~0x07) | new_codec) : (attrs & ~0x07);
            if (direct || outlen == 0) {
                finish_batch(out + st[9], b, kept, out_attrs, max_ts, outlen);
                if (note_written(st, last, max_ts, 61 + outlen, oidx, ocap, tidx, tcap)) return RC_CORRUPT;
                st[9] += 61 + outlen;
                st[13] += kept;
                st[14] += 61 + outlen;
            } else {
                st[19] = pos;
                st[20] = kept;
                st[21] = max_ts;
                st[22] = out_attrs;
                st[23] = outlen;
                st[10] = pos;
                return RC_COMPRESS;
            }
        }
        pos += size;
        done += size;
        if (done >= budget) {
            st[10] = pos;
            return RC_BUDGET;
        }
    }
    st[10] = pos;
    return RC_END;
}

/*
 * The header-only prescan of one segment: records in batches that reach into [dirty_start,
 * dirty_end) (added to io[1]), the positions of control batches (ctrl, io[2] of them) and, when
 * want_pids, (producer id, last offset or -1 for a control batch, epoch) of every batch with a
 * producer id (pids, io[3] triples). io[0] is the position (in/out). RC_FLUSH when an output array
 * is full (the batch at io[0] is not yet counted), RC_END at the end of the complete batches.
 */
int64_t km_prescan(const uint8_t *buf, int64_t end, int64_t dirty_start, int64_t dirty_end, int64_t *ctrl,
                   int64_t ctrl_cap, int64_t *pids, int64_t pid_cap, int64_t want_pids, int64_t *io) {
    int64_t pos = io[0];
    io[2] = 0;
    io[3] = 0;
    while (end - pos >= 61) {
        const uint8_t *b = buf + pos;
        int64_t size = (int64_t)be32(b + 8) + 12;
        if (size < 61 || pos + size > end) break;
        int64_t base = (int64_t)be64(b);
        int64_t last = base + be32(b + 23);
        int64_t pid = (int64_t)be64(b + 43);
        int control = (be16(b + 21) & 0x20) != 0;
        if (pid >= 0) {
            if ((control && io[2] >= ctrl_cap) || (want_pids && io[3] >= pid_cap)) {
                io[0] = pos;
                return RC_FLUSH;
            }
            if (control) ctrl[io[2]++] = pos;
            if (want_pids) {
                pids[3 * io[3]] = pid;
                pids[3 * io[3] + 1] = control ? -1 : last;
                pids[3 * io[3] + 2] = be16(b + 51);
                io[3]++;
            }
        }
        if (last >= dirty_start && base < dirty_end) io[1] += be32(b + 57);
        pos += size;
    }
    io[0] = pos;
    return RC_END;
}

/*
 * Batch boundaries of buf[io[0], end), for the guarantee check (kompakt.cleaner.guarantees): per
 * complete batch its position, base offset and last offset into the arrays (at most cap), io[1]
 * of them; io[0] is the position (in/out). RC_FLUSH when the arrays are full, RC_END at the end or
 * at the first incomplete batch (the caller compares io[0] with the file size).
 */
int64_t km_batch_walk(const uint8_t *buf, int64_t end, int64_t *pos_out, int64_t *base_out, int64_t *last_out,
                      int64_t cap, int64_t *io) {
    int64_t pos = io[0];
    int64_t n = 0;
    while (end - pos >= 61) {
        const uint8_t *b = buf + pos;
        int64_t size = (int64_t)be32(b + 8) + 12;
        if (size < 61 || pos + size > end) break;
        if (n >= cap) {
            io[0] = pos;
            io[1] = n;
            return RC_FLUSH;
        }
        pos_out[n] = pos;
        base_out[n] = (int64_t)be64(b);
        last_out[n] = base_out[n] + be32(b + 23);
        n++;
        pos += size;
    }
    io[0] = pos;
    io[1] = n;
    return RC_END;
}
