/*
 * The group commit's sync thread (kompakt/storage/group_commit.py, native rounds): a POSIX thread
 * that runs one round of fsync/fdatasync calls at a time and then writes the event loop's eventfd.
 * It never touches Python, so it never waits for the GIL: the Python flusher thread had to take
 * the GIL after every sync before it could tell the loop, and on two busy cores that hand-over
 * was where acks=all answers spent their tail (bench/RESULTS.md, 2026-11-28 21:15).
 *
 * Protocol (one round in flight at a time; the loop is the only caller of submit/take/free):
 *   km_flusher_new(efd)                 start the thread; efd is the loop's eventfd (not owned)
 *   km_flusher_submit(h, fds, kinds, n) copy n descriptors (kind 0 fdatasync, 1 fsync) and wake
 *                                       the thread; -1 when a round is still in flight
 *   km_flusher_take(h, errnos, done_at) after the eventfd fired: the round's errno per descriptor
 *                                       (0 = synced) and its CLOCK_MONOTONIC end; returns n,
 *                                       or -1 when no round has finished
 *   km_flusher_free(h)                  stop: the round in flight (if any) finishes first; join
 * The descriptors are the caller's (duplicates it closes after take), so a file closed meanwhile
 * is still synced through its own open file description, never a reused number.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    int efd;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int *fds;
    int *kinds;
    int *errs;
    int64_t cap;
    int64_t n;
    int state;          /* 0 idle, 1 submitted, 2 done (not taken yet) */
    int stop;
    double done_at;
} km_flusher;

static double monotonic_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *flusher_run(void *arg) {
    km_flusher *f = (km_flusher *)arg;
    pthread_mutex_lock(&f->mu);
    for (;;) {
        while (f->state != 1 && !f->stop) pthread_cond_wait(&f->cv, &f->mu);
        if (f->state != 1) break;                       /* stopped with nothing submitted */
        int64_t n = f->n;
        pthread_mutex_unlock(&f->mu);
        for (int64_t i = 0; i < n; i++) {              /* the arrays are ours until state 2 */
            int rc = f->kinds[i] ? fsync(f->fds[i]) : fdatasync(f->fds[i]);
            f->errs[i] = rc == 0 ? 0 : errno;
        }
        double at = monotonic_s();
        pthread_mutex_lock(&f->mu);
        f->done_at = at;
        f->state = 2;
        uint64_t one = 1;
        ssize_t w = write(f->efd, &one, sizeof one);   /* the loop's reader takes the round */
        (void)w;                                        /* EAGAIN: the counter is already set */
    }
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

void *km_flusher_new(int efd) {
    km_flusher *f = calloc(1, sizeof *f);
    if (f == NULL) return NULL;
    f->efd = efd;
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    if (pthread_create(&f->thread, NULL, flusher_run, f) != 0) {
        pthread_mutex_destroy(&f->mu);
        pthread_cond_destroy(&f->cv);
        free(f);
        return NULL;
    }
    return f;
}

int64_t km_flusher_submit(void *h, const int *fds, const int *kinds, int64_t n) {
    km_flusher *f = (km_flusher *)h;
    pthread_mutex_lock(&f->mu);
    if (f->state != 0 || f->stop) {
        pthread_mutex_unlock(&f->mu);
        return -1;
    }
    if (n > f->cap) {
        int64_t cap = n < 64 ? 64 : n;
        int *a = realloc(f->fds, sizeof(int) * cap), *b = NULL, *c = NULL;
        if (a) f->fds = a;
        b = realloc(f->kinds, sizeof(int) * cap);
        if (b) f->kinds = b;
        c = realloc(f->errs, sizeof(int) * cap);
        if (c) f->errs = c;
        if (!a || !b || !c) {
            pthread_mutex_unlock(&f->mu);
            return -2;
        }
        f->cap = cap;
    }
    memcpy(f->fds, fds, sizeof(int) * n);
    memcpy(f->kinds, kinds, sizeof(int) * n);
    f->n = n;
    f->state = 1;
    pthread_cond_signal(&f->cv);
    pthread_mutex_unlock(&f->mu);
    return 0;
}

int64_t km_flusher_take(void *h, int *errnos, double *done_at) {
    km_flusher *f = (km_flusher *)h;
    pthread_mutex_lock(&f->mu);
    if (f->state != 2) {
        pthread_mutex_unlock(&f->mu);
        return -1;
    }
    int64_t n = f->n;
    memcpy(errnos, f->errs, sizeof(int) * n);
    *done_at = f->done_at;
    f->state = 0;
    pthread_mutex_unlock(&f->mu);
    return n;
}

void km_flusher_free(void *h) {
    km_flusher *f = (km_flusher *)h;
    pthread_mutex_lock(&f->mu);
    f->stop = 1;
    pthread_cond_signal(&f->cv);
    pthread_mutex_unlock(&f->mu);
    pthread_join(f->thread, NULL);
    pthread_mutex_destroy(&f->mu);
    pthread_cond_destroy(&f->cv);
    free(f->fds);
    free(f->kinds);
    free(f->errs);
    free(f);
}
