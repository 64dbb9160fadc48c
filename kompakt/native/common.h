/*
 * Helpers shared by the sources of Kompakt's compiled seam (the .c files beside it): big-endian
 * fields of the v2 batch header, zigzag varints, CRC-32C. Plain C99 + GCC builtins, no Python.
 *
 * Byte offsets in the v2 batch header (kompakt/protocol/records.py has the full layout):
 * 0 baseOffset, 8 length, 12 leader epoch, 16 magic, 17 crc, 21 attributes, 23 lastOffsetDelta,
 * 27 baseTimestamp, 35 maxTimestamp, 43 producerId, 51 producerEpoch, 53 baseSequence, 57 count,
 * 61 records.
 */
#ifndef KOMPAKT_NATIVE_COMMON_H
#define KOMPAKT_NATIVE_COMMON_H

#include <stdint.h>
#include <string.h>

uint32_t km_crc32c(uint32_t crc, const uint8_t *p, int64_t n);

static inline uint64_t be64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
    return v;
}

static inline void put_be64(uint8_t *p, int64_t x) {
    uint64_t v = (uint64_t)x;
    for (int i = 7; i >= 0; i--) {
        p[i] = (uint8_t)v;
        v >>= 8;
    }
}

static inline uint64_t ld64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static inline int32_t be32(const uint8_t *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}

static inline int16_t be16(const uint8_t *p) { return (int16_t)(((uint16_t)p[0] << 8) | p[1]); }

static inline void put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* The cleaner's varint: up to 10 bytes, 64-bit. 0, or -1 when it runs past `end` or is longer. */
static inline int rd_varint(const uint8_t *d, int64_t end, int64_t *p, int64_t *out) {
    if (*p < end && d[*p] < 0x80) { /* the one-byte case: most lengths and deltas */
        uint64_t b = d[(*p)++];
        *out = (int64_t)((b >> 1) ^ (~(b & 1) + 1));
        return 0;
    }
    uint64_t v = 0;
    int shift = 0;
    for (;;) {
        if (*p >= end) return -1;
        uint8_t b = d[(*p)++];
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) break;
        shift += 7;
        if (shift > 63) return -1;
    }
    *out = (int64_t)((v >> 1) ^ (~(v & 1) + 1));
    return 0;
}

/* The payload table (decompressed records of compressed batches, filled by Python ahead of a
   range loop): pl_pos ascending batch positions, pl_ptr / pl_len their records (pl_len < 0: the
   codec refused them), pl_n entries; *cursor moves past the entries used. The records of the
   batch at pos: 1 found, 0 not in the table, -1 the codec failed. */
static inline int find_payload(int64_t pos, const int64_t *pl_pos, const uint8_t *const *pl_ptr,
                               const int64_t *pl_len, int64_t pl_n, int64_t *cursor, const uint8_t **data,
                               int64_t *len) {
    while (*cursor < pl_n && pl_pos[*cursor] < pos) (*cursor)++;
    if (*cursor >= pl_n || pl_pos[*cursor] != pos) return 0;
    if (pl_len[*cursor] < 0) return -1;
    *data = pl_ptr[*cursor];
    *len = pl_len[*cursor];
    return 1;
}

#endif
