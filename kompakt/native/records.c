/*
 * LogValidator's per-record checks over one produced batch (kompakt/storage/record_check.py holds
 * the pure-Python reference; both must give the same answer for every input, tests compare them).
 *
 * A record (zigzag varints; "var32" is Kafka's ByteUtils.readVarint: at most 5 bytes, the value
 * kept to 32 bits; "var64" its readVarlong: at most 10 bytes, kept to 64 bits):
 *
 *   length var32 | attributes int8 | timestampDelta var64 | offsetDelta var32 |
 *   keyLength var32 (< 0: null) | key | valueLength var32 (< 0: null) | value |
 *   headerCount var32 (>= 0) | headers: keyLength var32 (>= 0), key, valueLength var32, value
 *
 * Rules, checked record by record in order: the record parses inside [its start, start + length)
 * and its fields end exactly there; after `count` records no byte is left. The first violation
 * ends the scan (corrupt). Record errors (no key where the topic needs one; a timestamp out of
 * range) do not end it: the first one is reported once the whole batch parsed, so a corrupt
 * record anywhere wins over a keyless one (as Kafka, whose record iterator throws while the
 * validator collects record errors). Within a record the key check comes before the timestamp.
 */
#include "common.h"

enum { CHECK_OK = 0, CHECK_CORRUPT = 1, CHECK_KEYLESS = 2, CHECK_TIMESTAMP = 3 };
enum { R_PAST_END = 1, R_VARINT_TOO_LONG = 2, R_BAD_SIZE = 3, R_NEG_HEADER_COUNT = 4, R_NEG_HEADER_KEY = 5,
       R_SIZE_MISMATCH = 6, R_TRAILING = 7 };
enum { F_REQUIRE_KEY = 1, F_CHECK_TIMESTAMPS = 2, F_LOG_APPEND_TIME = 4 };

/* the raw (unzigzagged) bits of a varint of at most `nbytes` bytes: 0, -R_PAST_END or -R_VARINT_TOO_LONG */
static inline int rd_raw(const uint8_t *d, int64_t end, int64_t *p, int nbytes, uint64_t *out) {
    uint64_t v = 0;
    for (int i = 0; i < nbytes; i++) {
        if (*p >= end) return -R_PAST_END;
        uint8_t b = d[(*p)++];
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *out = v;
            return 0;
        }
    }
    return -R_VARINT_TOO_LONG;
}

static inline int rd_var32(const uint8_t *d, int64_t end, int64_t *p, int64_t *out) {
    uint64_t raw;
    int rc = rd_raw(d, end, p, 5, &raw);
    uint32_t v = (uint32_t)raw; /* Java's int: bits past 32 of a 5-byte varint are dropped */
    *out = (int64_t)(int32_t)((v >> 1) ^ (~(v & 1) + 1));
    return rc;
}

static inline int rd_var64(const uint8_t *d, int64_t end, int64_t *p, int64_t *out) {
    uint64_t v;
    int rc = rd_raw(d, end, p, 10, &v);
    *out = (int64_t)((v >> 1) ^ (~(v & 1) + 1));
    return rc;
}

/* a length-prefixed field (key, value, header value): null when the length is negative */
static inline int skip_bytes(int64_t rec_end, int64_t *q, int64_t len) {
    if (len < 0) return 0;
    if (len > rec_end - *q) return -R_PAST_END;
    *q += len;
    return 0;
}

#define TRY(x)                     \
    do {                           \
        int rc_ = (x);             \
        if (rc_) {                 \
            reason = -rc_;         \
            goto corrupt;          \
        }                          \
    } while (0)

/*
 * The records of one batch: d[p, end), `count` records. flags: F_REQUIRE_KEY (compacted topic,
 * not a control batch), F_CHECK_TIMESTAMPS (each timestamp within [now - before, now + after];
 * -1 = no timestamp, not checked), F_LOG_APPEND_TIME (the batch says LogAppendTime: every record's
 * timestamp is fixed_ts, else base_ts + its delta).
 * Returns CHECK_*; io out: [0] index of the record at fault (count for bytes left over), [1] the
 * corrupt reason (R_*) or the faulty record's timestamp delta, [2] 1 when the offset deltas are not
 * 0, 1, ..., count - 1, [3] records parsed.
 */
int64_t km_check_records(const uint8_t *d, int64_t end, int64_t p, int64_t count, int64_t flags, int64_t base_ts,
                         int64_t fixed_ts, int64_t now, int64_t before, int64_t after, int64_t *io) {
    int64_t first_err = CHECK_OK, err_index = 0, err_td = 0, nonseq = 0, i = 0;
    int reason = 0;
    if (p < 0 || p > end) {
        reason = R_PAST_END;
        goto corrupt;
    }
    for (; i < count; i++) {
        int64_t ln, td, od, kl, vl, hc;
        TRY(rd_var32(d, end, &p, &ln));
        if (ln < 0 || ln > end - p) {
            reason = R_BAD_SIZE;
            goto corrupt;
        }
        int64_t rec_end = p + ln;
        int64_t q = p;
        if (q >= rec_end) {
            reason = R_PAST_END; /* not even the attributes byte */
            goto corrupt;
        }
        q++;
        TRY(rd_var64(d, rec_end, &q, &td));
        TRY(rd_var32(d, rec_end, &q, &od));
        TRY(rd_var32(d, rec_end, &q, &kl));
        TRY(skip_bytes(rec_end, &q, kl));
        TRY(rd_var32(d, rec_end, &q, &vl));
        TRY(skip_bytes(rec_end, &q, vl));
        TRY(rd_var32(d, rec_end, &q, &hc));
        if (hc < 0) {
            reason = R_NEG_HEADER_COUNT;
            goto corrupt;
        }
        for (int64_t h = 0; h < hc; h++) { /* each header takes >= 2 bytes: the loop ends */
            int64_t hkl, hvl;
            TRY(rd_var32(d, rec_end, &q, &hkl));
            if (hkl < 0) {
                reason = R_NEG_HEADER_KEY;
                goto corrupt;
            }
            TRY(skip_bytes(rec_end, &q, hkl));
            TRY(rd_var32(d, rec_end, &q, &hvl));
            TRY(skip_bytes(rec_end, &q, hvl));
        }
        if (q != rec_end) {
            reason = R_SIZE_MISMATCH;
            goto corrupt;
        }
        if (od != i) nonseq = 1;
        if (first_err == CHECK_OK) {
            if ((flags & F_REQUIRE_KEY) && kl < 0) {
                first_err = CHECK_KEYLESS;
                err_index = i;
            } else if (flags & F_CHECK_TIMESTAMPS) {
                __int128 ts = (flags & F_LOG_APPEND_TIME) ? (__int128)fixed_ts : (__int128)base_ts + td;
                if (ts != -1 && ((__int128)now - ts > before || ts - now > after)) {
                    first_err = CHECK_TIMESTAMP;
                    err_index = i;
                    err_td = td;
                }
            }
        }
        p = rec_end;
    }
    io[2] = nonseq;
    io[3] = i;
    if (p != end) {
        reason = R_TRAILING;
        goto corrupt;
    }
    io[0] = err_index;
    io[1] = first_err == CHECK_TIMESTAMP ? err_td : 0;
    return first_err;
corrupt:
    io[0] = i;
    io[1] = reason;
    io[2] = nonseq;
    io[3] = i;
    return CHECK_CORRUPT;
}
