/* test_fuser_alloc_failures.c — allocation failures through the fuser's compile and run: the Nth
 * allocation fails (th_alloc_fail_after), for every N until compiling, then running, a program with a
 * fusion region (a transposed input, a row reduction, a transposed output) succeeds; each failure is
 * TH_ERR_NOMEM with no program, no outputs and nothing leaked (the ASan build checks the leaks). */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/ir.h"
#include "core/scalar.h"
#include "executors/fuser/fuser.h"
#include "thunder/thunder.h"

#include "fuser_test_util.h"
#include "fuser_trace_util.h"

/* The Nth allocation fails, for every N until compiling (then running) succeeds: each failure is
 * TH_ERR_NOMEM with no program, no outputs and nothing leaked (the ASan build checks the leaks). */
static void test_fault_injection(void **state) {
  (void)state;
  th_trace *tr = parse("def computation(x, r):\n  # x: \"cpu f32[4, 6]\"\n  # r: \"cpu f32[6, 4]\"\n"
                       "  rt = prims.transpose(r, (1, 0))\n  t0 = prims.add(x, rt)\n  t1 = prims.amax(t0, (1,))\n"
                       "  t2 = prims.broadcast_in_dim(t1, (4, 6), (0,))\n  t3 = prims.sub(t0, t2)\n"
                       "  t4 = prims.exp(t3)\n  t5 = prims.transpose(t4, (1, 0))\n  return (t5, t1)\n");
  th_compile_options o;
  memset(&o, 0, sizeof o);
  o.executors = with_fuser;
  o.nexecutors = 3;
  th_program *p = NULL;
  int ok_at = 0;
  for (long n = 1; n < 100000 && !ok_at; n++) {
    th_alloc_fail_after(n);
    th_status st = th_program_compile(tr, &o, &p);
    th_alloc_fail_after(0);
    if (st == TH_OK) {
      ok_at = (int)n;
      break;
    }
    if (st != TH_ERR_NOMEM) fail_msg("allocation %ld: %s", n, th_last_error());
    assert_null(p);
  }
  assert_true(ok_at > 1);
  assert_int_equal(count_id(th_program_trace(p), TH_OP_DYNAMIC), 1);
  int64_t sx[2] = {4, 6}, sr[2] = {6, 4};
  th_tensor *in[2] = {th_tensor_empty(TH_F32, 2, sx), th_tensor_empty(TH_F32, 2, sr)};
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < 24; i++) ((float *)th_tensor_data(in[k]))[i] = (float)((i * 7 + k) % 11) / 4.0f;
  int run_ok = 0;
  for (long n = 1; n < 100000 && !run_ok; n++) {
    th_tensor **out = NULL;
    int nout = -1;
    th_alloc_fail_after(n);
    th_status st = th_program_run(p, 2, in, &nout, &out);
    th_alloc_fail_after(0);
    if (st == TH_OK) {
      run_ok = (int)n;
      assert_int_equal(nout, 2);
      th_tensor_release(out[0]);
      th_tensor_release(out[1]);
      free(out);
      break;
    }
    assert_int_equal(st, TH_ERR_NOMEM);
    assert_null(out);
  }
  assert_true(run_ok > 1);
  th_tensor_release(in[0]);
  th_tensor_release(in[1]);
  th_program_free(p);
  th_trace_free(tr);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_fault_injection),
  };
  return cmocka_run_group_tests(tests, setup_cache, NULL);
}
