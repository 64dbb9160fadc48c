/*
 * Decryption of TLS records for the TLS layer's worker threads (kompakt/broker/network/
 * tls_transport.py, through tls_records.py): SSL_read_ex called record after record inside one
 * call from Python. ssl.SSLObject.read returns one TLS record (16 KiB at most) per call and takes
 * the GIL back after each; on a worker thread beside a busy event loop every one of those takes
 * waited for the loop to let go (up to the 5 ms switch interval), so a worker decrypted a
 * megabyte in as many as 64 hand-overs. Called through ctypes.CDLL, this drops the GIL once for
 * the whole buffer.
 *
 *   km_tls_read(read_ex, get_error, ssl, buf, len, err)
 *       decrypt into buf[0, len) until it is full or a call of read_ex (libssl's SSL_read_ex,
 *       passed in with SSL_get_error: the very libssl the process's ssl module uses) reads
 *       nothing; returns the bytes written, and in *err what SSL_get_error said of the call that
 *       stopped it (0 when the buffer filled). SSL_ERROR_WANT_READ (2) is the usual end: no
 *       complete record left. For anything else (close_notify, an error) the caller asks
 *       SSLObject.read, which sees the same state and raises as it always does.
 * The caller owns the SSL object for the call (one thread at a time: tls_transport.py's jobs).
 */
#include <stddef.h>
#include <stdint.h>

typedef int (*km_ssl_read_ex)(void *ssl, void *buf, size_t num, size_t *readbytes);
typedef int (*km_ssl_get_error)(const void *ssl, int ret);

int64_t km_tls_read(void *read_ex, void *get_error, void *ssl, uint8_t *buf, int64_t len, int32_t *err) {
    km_ssl_read_ex fn = (km_ssl_read_ex)read_ex;
    int64_t filled = 0;
    *err = 0;
    while (filled < len) {
        size_t n = 0;
        int ret = fn(ssl, buf + filled, (size_t)(len - filled), &n);
        if (ret != 1 || n == 0) {
            *err = ((km_ssl_get_error)get_error)(ssl, ret);
            break;
        }
        filled += (int64_t)n;
    }
    return filled;
}
