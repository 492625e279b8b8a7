/* cache_test_prog.h — the program the kernel-cache tests compile (test_fuser_cache_bound.c,
 * test_fuser_cache_private.c): one fusion region per constant k, with exact results to check, so that
 * each k is its own cache entry. Include after <cmocka.h>, <string.h>, <stdlib.h> and "thunder/thunder.h". */
#ifndef TH_TEST_CACHE_TEST_PROG_H
#define TH_TEST_CACHE_TEST_PROG_H

/* The program of constant k: t1 = (a + k) * a, t2 = sum(t1), a: f64[8] = 0..7. With k = n + 0.5 every
 * value is exact: t2 = 140 + 28 k. */
static void prog_text(char *buf, size_t n, double k) {
  snprintf(buf, n,
           "def computation(a):\n  # a: \"cpu f64[8]\"\n  t0 = prims.add(a, %.17g)\n  t1 = prims.mul(t0, a)\n"
           "  t2 = prims.sum(t1, (0,))\n  return (t1, t2)\n",
           k);
}

/* Compiles and runs the program of constant k with executors fuser, eager: TH_OK with exact results,
 * else the status (a wrong result: TH_ERR_RUNTIME with a message). Never fails the test itself (usable
 * in forked children). */
static th_status run_prog(double k) {
  static const char *const fused[] = {"fuser", "eager"};
  char text[400];
  prog_text(text, sizeof text, k);
  th_trace *tr = NULL;
  th_status st = th_trace_parse(text, "<cache-test>", &tr);
  if (st != TH_OK) return st;
  th_compile_options o;
  memset(&o, 0, sizeof o);
  o.executors = fused;
  o.nexecutors = 2;
  th_program *p = NULL;
  st = th_program_compile(tr, &o, &p);
  th_trace_free(tr);
  if (st != TH_OK) return st;
  int64_t shape[1] = {8};
  th_tensor *a = th_tensor_new(TH_F64, 1, shape), **out = NULL;
  for (int i = 0; i < 8; i++) ((double *)th_tensor_data(a))[i] = i;
  int nout = 0;
  st = th_program_run(p, 1, &a, &nout, &out);
  th_program_free(p);
  th_tensor_release(a);
  if (st != TH_OK) return st;
  bool ok = nout == 2 && th_tensor_get_f64(out[1], 0) == 140 + 28 * k;
  for (int i = 0; ok && i < 8; i++) ok = th_tensor_get_f64(out[0], i) == (i + k) * i;
  for (int i = 0; i < nout; i++) th_tensor_release(out[i]);
  free(out);
  return ok ? TH_OK : th_error(TH_ERR_RUNTIME, "cache test: wrong result for k = %g", k);
}

#endif
