/*
 * CRC-32C (Castagnoli), as the v2 record batch uses over bytes [21, end): the SSE4.2 instruction
 * when the CPU has it, otherwise a byte-at-a-time table.
 */
#include "common.h"

static uint32_t crc_table[256];
static int crc_ready = 0;

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[i] = c;
    }
    crc_ready = 1;
}

static uint32_t crc32c_sw(uint32_t crc, const uint8_t *p, int64_t n) {
    if (!crc_ready) crc_init();
    crc = ~crc;
    while (n--) crc = crc_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return ~crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t crc, const uint8_t *p, int64_t n) {
    uint64_t c = ~crc & 0xffffffffu;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = __builtin_ia32_crc32di(c, v);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n--) c32 = __builtin_ia32_crc32qi(c32, *p++);
    return ~c32;
}
static int have_sse42 = -1;
#endif

uint32_t km_crc32c(uint32_t crc, const uint8_t *p, int64_t n) {
#if defined(__x86_64__)
    if (have_sse42 < 0) {
        __builtin_cpu_init();
        have_sse42 = __builtin_cpu_supports("sse4.2") ? 1 : 0;
    }
    if (have_sse42) return crc32c_hw(crc, p, n);
#endif
    return crc32c_sw(crc, p, n);
}

