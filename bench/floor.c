/* floor.c — the read floor for benchmarks driven from Python (bench_reduce.py loads it with ctypes):
 * th_bench_read_ms times one OpenMP pass that reads `bytes` at p once (the bytes any reduction of
 * that tensor must read), the way bench_util.h's copies time the read-once-write-once floor. */
#include <omp.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Reads bytes (whole 128-byte blocks; the tail is ignored) at p with all OpenMP threads: each thread
 * a contiguous range, four 32-byte vectors per step XORed into four accumulators (compiled with AVX2:
 * a read-bound loop, faster than any reduction's arithmetic); returns the elapsed milliseconds. *sink
 * gets the XOR so the reads cannot be dropped. */
typedef uint64_t v4u __attribute__((vector_size(32)));

double th_bench_read_ms(const void *p, size_t bytes, uint64_t *sink) {
  int64_t n = (int64_t)(bytes / 128);
  uint64_t x = 0;
  double t0 = now_ms();
#pragma omp parallel reduction(^ : x)
  {
    int t = omp_get_thread_num(), nt = omp_get_num_threads();
    int64_t b = n * t / nt, e = n * (t + 1) / nt;
    v4u a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
    for (int64_t i = b; i < e; i++) {
      const unsigned char *q = (const unsigned char *)p + 128 * i;
      v4u w0, w1, w2, w3;
      __builtin_memcpy(&w0, q, 32);
      __builtin_memcpy(&w1, q + 32, 32);
      __builtin_memcpy(&w2, q + 64, 32);
      __builtin_memcpy(&w3, q + 96, 32);
      a0 ^= w0, a1 ^= w1, a2 ^= w2, a3 ^= w3;
    }
    v4u a = a0 ^ a1 ^ a2 ^ a3;
    x ^= a[0] ^ a[1] ^ a[2] ^ a[3];
  }
  double t = now_ms() - t0;
  *sink = x;
  return t;
}
