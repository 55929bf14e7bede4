// The thread pool that runs CLANG kernels' parallel loops: the part of GNU OpenMP's ABI that gcc emits for
// `#pragma omp parallel for num_threads(n) if(...)` (GOMP_parallel and four omp_* queries), built by the host
// compiler as a shared object of its own and loaded with RTLD_GLOBAL before any kernel, so a kernel binds to it
// instead of libgomp (tinygrad/runtime/host_pool.py). The rendered C does not change.
//
// Why not libgomp: its team barrier makes the caller wait for every thread of the team, so a worker the scheduler
// has put aside (a busy machine) stalls a 0.1 ms kernel for a scheduler time slice or more (20-60 ms measured with
// 2 threads on 2 busy cores), and its idle workers spin for about 300k iterations after every loop, taking the
// core that the caller itself needs between kernels.
//
// Here the n parts of a loop are tasks: gcc's outlined body computes its static share from omp_get_thread_num()
// and omp_get_num_threads(), which answer the task's number, not a thread's. The caller and the workers claim
// tasks from one atomic word, so the caller does every part that no worker has started, and waits only for parts
// already running. Every wait spins for a bounded time, then sleeps on a futex.
//
// NOTE: a translation unit of its own (header-only style), compiled alone; never included by a kernel.
#define _GNU_SOURCE
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define TG_MAX_WORKERS 63
// how long a wait spins before it sleeps: a kernel worth threads runs for tens of microseconds or more, so a
// longer spin buys little and takes a core from whoever else needs it
#define TG_SPIN_NS 50000

typedef void (*tg_body)(void*);

// the task the calling thread is running: what omp_get_thread_num / omp_get_num_threads answer
static __thread int tg_task = 0;
static __thread int tg_ntasks = 1;
static __thread int tg_inside = 0;

static int tg_max_threads = 1;
static int tg_nworkers = 0;
static pthread_mutex_t tg_start_lock = PTHREAD_MUTEX_INITIALIZER;
// one loop at a time: a second caller (another Python thread) runs its loop alone rather than wait
static atomic_int tg_busy = 0;

// the loop in flight: body and data are written before `claims` publishes them
static tg_body tg_fn;
static void* tg_data;
// claims = generation << 32 | tasks << 16 | next task; a claim is a compare-and-swap that adds 1
static _Atomic uint64_t tg_claims = 0;
// tasks of the current loop not yet finished
static atomic_int tg_pending = 0;
// futex words: the generation workers sleep on, and the caller's sleeping flag
static atomic_int tg_generation = 0;
static atomic_int tg_sleepers = 0;
static atomic_int tg_caller_sleeps = 0;

static long tg_futex(atomic_int* word, int op, int val) {
    return syscall(SYS_futex, (int*)word, op | FUTEX_PRIVATE_FLAG, val, NULL, NULL, 0);
}

static int64_t tg_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline void tg_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

// Claims and runs tasks of generation `gen` until none is left; returns when there is nothing more to claim.
static void tg_run_tasks(uint32_t gen) {
    uint64_t c = atomic_load(&tg_claims);
    for (;;) {
        uint32_t next = (uint32_t)(c & 0xffff);
        uint32_t ntasks = (uint32_t)((c >> 16) & 0xffff);
        if ((uint32_t)(c >> 32) != gen || next >= ntasks) {
            return;
        }
        // on failure `c` is reloaded and the loop looks again
        if (!atomic_compare_exchange_weak(&tg_claims, &c, c + 1)) {
            continue;
        }
        // the claim holds a task of `gen` that is not finished, so the caller has not moved on: fn and data are
        // this loop's
        tg_task = (int)next;
        tg_ntasks = (int)ntasks;
        tg_inside = 1;
        tg_fn(tg_data);
        tg_inside = 0;
        tg_task = 0;
        tg_ntasks = 1;
        if (atomic_fetch_sub(&tg_pending, 1) == 1 && atomic_load(&tg_caller_sleeps)) {
            tg_futex(&tg_pending, FUTEX_WAKE, 1);
        }
        c = atomic_load(&tg_claims);
    }
}

// `arg`: the generation when the worker was started, before the loop that starts it is published (read here, the
// worker could miss that loop)
static void* tg_worker(void* arg) {
    int seen = (int)(intptr_t)arg;
    for (;;) {
        int64_t until = tg_now_ns() + TG_SPIN_NS;
        int spins = 0;
        while (atomic_load(&tg_generation) == seen) {
            tg_pause();
            if (++spins % 64 == 0 && tg_now_ns() > until) {
                atomic_fetch_add(&tg_sleepers, 1);
                if (atomic_load(&tg_generation) == seen) {
                    tg_futex(&tg_generation, FUTEX_WAIT, seen);
                }
                atomic_fetch_sub(&tg_sleepers, 1);
            }
        }
        seen = atomic_load(&tg_generation);
        tg_run_tasks((uint32_t)seen);
    }
    return NULL;
}

// Starts the workers once: threads - 1 of them (the caller is the other).
static int tg_start_workers(void) {
    pthread_mutex_lock(&tg_start_lock);
    int want = tg_max_threads - 1;
    if (want > TG_MAX_WORKERS) {
        want = TG_MAX_WORKERS;
    }
    while (tg_nworkers < want) {
        pthread_t t;
        if (pthread_create(&t, NULL, tg_worker, (void*)(intptr_t)atomic_load(&tg_generation)) != 0) {
            break;
        }
        pthread_detach(t);
        tg_nworkers++;
    }
    int n = tg_nworkers;
    pthread_mutex_unlock(&tg_start_lock);
    return n;
}

static void tg_run_alone(tg_body fn, void* data) {
    int task = tg_task, ntasks = tg_ntasks, inside = tg_inside;
    tg_task = 0;
    tg_ntasks = 1;
    tg_inside = 1;
    fn(data);
    tg_task = task;
    tg_ntasks = ntasks;
    tg_inside = inside;
}

void GOMP_parallel(tg_body fn, void* data, unsigned num_threads, unsigned flags) {
    (void)flags;
    unsigned n = num_threads ? num_threads : (unsigned)tg_max_threads;
    int expected = 0;
    // one task, a nested loop, no workers, or another loop in flight: this thread runs the whole loop
    if (n < 2 || n > 0xffff || tg_inside || tg_max_threads < 2 || tg_start_workers() < 1 ||
            !atomic_compare_exchange_strong(&tg_busy, &expected, 1)) {
        tg_run_alone(fn, data);
        return;
    }
    tg_fn = fn;
    tg_data = data;
    atomic_store(&tg_pending, (int)n);
    uint32_t gen = (uint32_t)atomic_load(&tg_generation) + 1;
    atomic_store(&tg_claims, ((uint64_t)gen << 32) | ((uint64_t)n << 16));
    atomic_store(&tg_generation, (int)gen);
    if (atomic_load(&tg_sleepers) > 0) {
        tg_futex(&tg_generation, FUTEX_WAKE, INT_MAX);
    }
    // the caller's share: task 0 at least, and every task no worker has claimed by the time it is free
    tg_run_tasks(gen);
    int64_t until = tg_now_ns() + TG_SPIN_NS;
    int spins = 0;
    int left;
    while ((left = atomic_load(&tg_pending)) > 0) {
        tg_pause();
        if (++spins % 64 == 0 && tg_now_ns() > until) {
            atomic_store(&tg_caller_sleeps, 1);
            left = atomic_load(&tg_pending);
            if (left > 0) {
                tg_futex(&tg_pending, FUTEX_WAIT, left);
            }
            atomic_store(&tg_caller_sleeps, 0);
        }
    }
    atomic_store(&tg_busy, 0);
}

int omp_get_thread_num(void) { return tg_task; }

int omp_get_num_threads(void) { return tg_ntasks; }

int omp_get_max_threads(void) { return tg_inside ? 1 : tg_max_threads; }

void omp_set_num_threads(int n) { tg_max_threads = n < 1 ? 1 : n; }

// A forked child has none of the parent's workers: it runs every loop on its one thread.
static void tg_after_fork_in_child(void) {
    tg_max_threads = 1;
    tg_nworkers = 0;
    atomic_store(&tg_busy, 0);
}

__attribute__((constructor)) static void tg_init(void) {
    pthread_atfork(NULL, NULL, tg_after_fork_in_child);
}
