/* pool.c: the CPU kernels' own threads, for the work that is not a GEMM (attention's heads, the
 * element-wise kernels). A process with the machine's cores to itself runs OpenBLAS on several
 * threads; without this pool everything between two GEMMs would run on one of them while the
 * other cores wait. The pool runs as many parts as OpenBLAS has threads (blas.c: the cores this
 * rank has), the caller taking the first part; with one thread (a rank per core) the body runs
 * inline and nothing here is touched. */
#include "device/cpu/pool.h"

#include <cblas.h>
#include <pthread.h>

static struct {
    pthread_mutex_t lock;
    pthread_cond_t work, done;
    /* One job at a time: a second caller (another thread, or a body that calls back in) runs
     * its job inline rather than wait for the first. */
    pthread_mutex_t in_use;
    int32_t workers; /* threads started (parts 1 .. workers) */
    uint64_t generation;
    lwi_parallel_body *body;
    void *ctx;
    int64_t n;
    int32_t parts, pending;
    /* the generation when each worker was started: jobs after it are its to run, even one
     * posted before the new thread first takes the lock */
    uint64_t born[LWI_POOL_MAX];
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER,
          PTHREAD_MUTEX_INITIALIZER, 0, 0, NULL, NULL, 0, 0, 0, {0}};

int32_t lwi_cpu_threads(void) {
    int threads = openblas_get_num_threads();
    return threads < 1 ? 1 : threads > LWI_POOL_MAX ? LWI_POOL_MAX : threads;
}

/* part's share of [0, n): contiguous, sizes differing by at most one */
static void run_part(lwi_parallel_body *body, void *ctx, int64_t n, int32_t parts, int32_t part) {
    const int64_t begin = n * part / parts, end = n * (part + 1) / parts;
    if (begin < end) body(ctx, begin, end, part);
}

static void *worker(void *arg) {
    const int32_t part = (int32_t)(intptr_t)arg;
    pthread_mutex_lock(&pool.lock);
    uint64_t seen = pool.born[part];
    for (;;) {
        while (pool.generation == seen)
            pthread_cond_wait(&pool.work, &pool.lock);
        seen = pool.generation;
        if (part >= pool.parts) continue;
        lwi_parallel_body *body = pool.body;
        void *ctx = pool.ctx;
        const int64_t n = pool.n;
        const int32_t parts = pool.parts;
        pthread_mutex_unlock(&pool.lock);
        run_part(body, ctx, n, parts, part);
        pthread_mutex_lock(&pool.lock);
        if (--pool.pending == 0) pthread_cond_signal(&pool.done);
    }
    return NULL;
}

/* Starts workers up to parts - 1 of them; returns how many parts can run. Called with in_use. */
static int32_t start_workers(int32_t parts) {
    pthread_mutex_lock(&pool.lock);
    while (pool.workers < parts - 1) {
        pthread_t thread;
        pool.born[pool.workers + 1] = pool.generation;
        if (pthread_create(&thread, NULL, worker, (void *)(intptr_t)(pool.workers + 1)) != 0)
            break; /* fewer threads: the parts that have one still run */
        pthread_detach(thread);
        pool.workers++;
    }
    pthread_mutex_unlock(&pool.lock);
    return pool.workers + 1 < parts ? pool.workers + 1 : parts;
}

void lwi_cpu_parallel(int64_t n, int64_t grain, lwi_parallel_body *body, void *ctx) {
    if (n <= 0) return;
    int64_t want = grain > 0 ? n / grain : n;
    int32_t parts = lwi_cpu_threads();
    if (want < parts) parts = want < 1 ? 1 : (int32_t)want;
    if (parts <= 1 || pthread_mutex_trylock(&pool.in_use) != 0) {
        body(ctx, 0, n, 0);
        return;
    }
    parts = start_workers(parts);
    if (parts <= 1) {
        pthread_mutex_unlock(&pool.in_use);
        body(ctx, 0, n, 0);
        return;
    }
    /* A body's GEMMs run on its own thread: OpenBLAS's threads would take them one caller at a
     * time (its pool serves one call at once), so it is held to one thread meanwhile. */
    const int blas_threads = openblas_get_num_threads();
    openblas_set_num_threads(1);
    pthread_mutex_lock(&pool.lock);
    pool.body = body, pool.ctx = ctx, pool.n = n, pool.parts = parts, pool.pending = parts - 1;
    pool.generation++;
    pthread_cond_broadcast(&pool.work);
    pthread_mutex_unlock(&pool.lock);
    run_part(body, ctx, n, parts, 0);
    pthread_mutex_lock(&pool.lock);
    while (pool.pending > 0)
        pthread_cond_wait(&pool.done, &pool.lock);
    pthread_mutex_unlock(&pool.lock);
    openblas_set_num_threads(blas_threads);
    pthread_mutex_unlock(&pool.in_use);
}
