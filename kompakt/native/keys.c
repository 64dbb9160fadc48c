/*
 * Keys for exact compaction (kompakt/pipeline/keyscan.py, `kompakt pipeline compact`): walk the
 * batches of a chunk of a segment (mapped in memory) and write, for every keyed record of a data
 * batch with an offset in [min_offset, max_offset], its offset, its batch's base offset and its key, as the three
 * buffers of Arrow columns (int64, int64, binary = int32 offsets + bytes). The pure-Python
 * reference is the reader's light path (pipeline/reader.py iter_split_records) filtered the same
 * way; tests compare them.
 *
 * Anything unusual goes back to Python at its position (RC_PYTHON), which reads that batch with
 * the reader's own checks and error messages: a torn or impossible length, a magic other than 2, a
 * CRC mismatch, records that do not parse, and a transactional batch (Python knows whether its
 * transaction aborted; it answers by passing the position back as txn_ok_pos). Control batches and
 * keyless records give no rows. Compressed batches take their records from the payload table
 * (common.h's find_payload: K_PAYLOAD to have it filled from the returned position).
 */
#include "common.h"

enum { K_END = 0, K_PYTHON = 2, K_STOP = 3, K_FLUSH = 4, K_PAYLOAD = 6, K_PAYLOAD_ERROR = -4 };

/* the keyed records of one batch's records d[p, end): 0, or -1 when they do not parse as `count`
   records (nothing is written then: rows and key bytes are committed only at the end) */
static int batch_keys(const uint8_t *d, int64_t end, int64_t p, int64_t count, int64_t base, int64_t min_offset,
                      int64_t max_offset,
                      int64_t *out_off, int64_t *out_base, int32_t *kofs, uint8_t *kdata, int64_t *rows,
                      int64_t *kbytes) {
    int64_t r = *rows, kb = *kbytes;
    for (int64_t i = 0; i < count; i++) {
        int64_t ln, td, od, kl;
        if (rd_varint(d, end, &p, &ln) || ln < 1 || ln > end - p) return -1;
        int64_t rec_end = p + ln;
        int64_t q = p + 1;
        if (rd_varint(d, rec_end, &q, &td) || rd_varint(d, rec_end, &q, &od) || rd_varint(d, rec_end, &q, &kl))
            return -1;
        if (kl > rec_end - q) return -1;
        int64_t off = base + od;
        if (kl >= 0 && off >= min_offset && off <= max_offset) {
            memcpy(kdata + kb, d + q, (size_t)kl);
            kb += kl;
            out_off[r] = off;
            out_base[r] = base;
            kofs[r + 1] = (int32_t)kb;
            r++;
        }
        p = rec_end;
    }
    if (p != end) return -1;
    *rows = r;
    *kbytes = kb;
    return 0;
}

/*
 * io: [0] position (in/out), [1] rows in the outputs (in/out), [2] key bytes (in/out),
 * [3] payload cursor, [4] batches read (+), [5] records read (+). kofs[0] must be 0.
 * Stops with K_FLUSH when a batch might not fit (cap_rows rows, cap_kdata key bytes), K_STOP at
 * the first batch past max_offset, K_END at the chunk's end.
 */
int64_t km_keys_range(const uint8_t *buf, int64_t end, int64_t min_offset, int64_t max_offset, int64_t txn_ok_pos,
                      int64_t *out_off,
                      int64_t *out_base, int32_t *kofs, uint8_t *kdata, int64_t cap_rows, int64_t cap_kdata,
                      const int64_t *pl_pos, const uint8_t *const *pl_ptr, const int64_t *pl_len, int64_t pl_n,
                      int64_t *io) {
    int64_t pos = io[0];
    while (pos < end) {
        const uint8_t *b = buf + pos;
        if (end - pos < 61 || b[16] != 2) break;
        int64_t size = (int64_t)be32(b + 8) + 12;
        if (size < 61 || size > end - pos) break;
        int64_t base = (int64_t)be64(b);
        if (base > max_offset) {
            io[0] = pos;
            return K_STOP;
        }
        int16_t attrs = be16(b + 21);
        if ((attrs & 0x10) && pos != txn_ok_pos) break;
        if (km_crc32c(0, b + 21, size - 21) != (uint32_t)be32(b + 17)) break;
        int64_t count = be32(b + 57);
        if (!(attrs & 0x20)) {
            const uint8_t *rd = b;
            int64_t rlen = size, rp = 61;
            if (attrs & 0x07) {
                int found = find_payload(pos, pl_pos, pl_ptr, pl_len, pl_n, &io[3], &rd, &rlen);
                if (found <= 0) {
                    io[0] = pos;
                    return found == 0 ? K_PAYLOAD : K_PAYLOAD_ERROR;
                }
                rp = 0;
            }
            /* a record takes at least one byte and a key no more than its record */
            if (count < 0 || io[1] + count > cap_rows || io[2] + (rlen - rp) > cap_kdata) {
                io[0] = pos;
                return K_FLUSH;
            }
            if (batch_keys(rd, rlen, rp, count, base, min_offset, max_offset, out_off, out_base, kofs, kdata,
                           &io[1], &io[2]))
                break;
        }
        io[4] += 1;
        io[5] += count;
        pos += size;
    }
    io[0] = pos;
    return pos < end ? K_PYTHON : K_END;
}

/* Set bit (o - base) of `bits` (nbits long, zeroed by the caller) for each of the n offsets;
   offsets outside [base, base + nbits) are counted, not set. Returns that count. */
int64_t km_offsets_to_bits(const int64_t *offs, int64_t n, int64_t base, int64_t nbits, uint8_t *bits) {
    int64_t outside = 0;
    for (int64_t i = 0; i < n; i++) {
        uint64_t d = (uint64_t)offs[i] - (uint64_t)base;
        if (nbits < 0 || d >= (uint64_t)nbits) {
            outside++;
            continue;
        }
        bits[d >> 3] |= (uint8_t)(1u << (d & 7));
    }
    return outside;
}
