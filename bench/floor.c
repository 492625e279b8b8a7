/* floor.c — the memory floors for benchmarks driven from Python, loaded with ctypes:
 * th_bench_read_ms times one OpenMP pass that reads `bytes` at p once (the bytes any reduction of
 * that tensor must read: bench_reduce.py); th_bench_copy_ms times one OpenMP copy of `bytes`, read
 * once and written once (the bytes any elementwise or row-wise op of that tensor must move:
 * bench_peers.py), with ordinary or non-temporal stores, as bench_util.h's bu_copy / bu_copy_stream. */
#include <immintrin.h>
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

/* Copies bytes from src to dst with all OpenMP threads, each a contiguous range of whole 32-byte
 * vectors (the tail bytes one at a time), and returns the elapsed milliseconds. stream = 0: ordinary
 * stores (each written line is first read for ownership, as a kernel's plain stores are: what a STREAM
 * copy measures); stream != 0: non-temporal stores (the lines bypass the cache and are not read first:
 * only the bytes themselves cross the memory bus). Both buffers are allocated and touched by the
 * caller beforehand; unaligned buffers take unaligned loads and ordinary stores. */
double th_bench_copy_ms(void *dst, const void *src, size_t bytes, int stream) {
  double t0 = now_ms();
#pragma omp parallel
  {
    int t = omp_get_thread_num(), nt = omp_get_num_threads();
    size_t nv = bytes / 32, b = nv * (size_t)t / (size_t)nt, e = nv * (size_t)(t + 1) / (size_t)nt;
    char *d = (char *)dst;
    const char *s = (const char *)src;
    int aligned = ((uintptr_t)d & 31) == 0;
    if (stream && aligned) {
      for (size_t i = b; i < e; i++)
        _mm256_stream_si256((__m256i *)(d + 32 * i), _mm256_loadu_si256((const __m256i *)(s + 32 * i)));
      _mm_sfence();
    } else {
      for (size_t i = b; i < e; i++)
        _mm256_storeu_si256((__m256i *)(d + 32 * i), _mm256_loadu_si256((const __m256i *)(s + 32 * i)));
    }
    if (t == nt - 1)
      for (size_t i = 32 * nv; i < bytes; i++) d[i] = s[i];
  }
  return now_ms() - t0;
}
