/* test_fuser_partition.c — the fusion executor's partition (src/executors/fuser: partition.c, passes.c)
 * under both strategies, dataflow and consecutive: which bsyms form a region, what leaves a region as an
 * output, and what never moves. A chain is one region; a non-fusible consumer in between seals a region;
 * a GEMM's bf16 convert is sunk to its reader; copy_ and random ops (effects) are never crossed and the
 * return stays last; the partitioned trace has no cycles; reductions and layout ops join the pointwise
 * ops around them; softmax, log_softmax, layer_norm, rms_norm and var_mean are one region each;
 * independent chains merge as nests of one region; seed 003's fp8 scaling (a float8 linear in prims) is
 * one region with eager's results bit for bit; broadcast sinking recomputes cheap ops after a broadcast
 * (attention's mask) and never moves a read of a tensor past an in-place copy_ into it. */
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

static void test_chain_one_region(void **state) {
  (void)state;
  th_trace *tr = parse("def computation(a, b):\n"
                       "  # a: \"cpu f32[4]\"\n  # b: \"cpu f32[4]\"\n"
                       "  t0 = prims.add(a, b)\n  t1 = prims.mul(t0, 2.0)\n  t2 = prims.exp(t1)\n"
                       "  return (t0, t2)\n");
  for (int s = 0; s < 2; s++) {
    th_trace *p = partition(tr, (th_fuser_strategy)s);
    assert_int_equal(p->bsyms.n, 2);
    const th_bsym *r = bsym_at(p, 0);
    assert_int_equal(r->sym->id, TH_OP_DYNAMIC);
    assert_string_equal(r->sym->name, "fusion0");
    assert_int_equal(r->nsubs, 3);
    assert_int_equal(r->out.kind, TH_ARG_LIST);
    assert_int_equal(r->out.u.seq.n, 2);
    char *txt = print(p);
    assert_non_null(strstr(txt, "[t0, t2] = fusion0(a, b)"));
    free(txt);
    assert_int_equal(bsym_at(p, 1)->sym->id, TH_OP_prims_python_return);
    th_trace_free(p);
  }
  th_trace_free(tr);
}

static void test_dataflow_vs_consecutive(void **state) {
  (void)state;
  th_trace *tr = parse("def computation(a, b, m):\n"
                       "  # a: \"cpu f32[4]\"\n  # b: \"cpu f32[4]\"\n  # m: \"cpu f32[3, 3]\"\n"
                       "  t0 = prims.add(a, b)\n  t1 = prims.matmul(m, m)\n  t2 = prims.mul(t0, 2.0)\n"
                       "  return (t1, t2)\n");
  th_trace *d = partition(tr, TH_FUSER_DATAFLOW);
  assert_int_equal(d->bsyms.n, 3);
  assert_int_equal(bsym_at(d, 0)->sym->id, TH_OP_prims_matmul);
  assert_int_equal(bsym_at(d, 1)->sym->id, TH_OP_DYNAMIC);
  assert_int_equal(bsym_at(d, 1)->out.u.seq.n, 1); /* only t2 leaves */
  th_trace *c = partition(tr, TH_FUSER_CONSECUTIVE);
  assert_int_equal(c->bsyms.n, 4); /* nothing adjacent: no region, nothing moved */
  assert_int_equal(bsym_at(c, 0)->sym->id, TH_OP_prims_add);
  assert_int_equal(bsym_at(c, 1)->sym->id, TH_OP_prims_matmul);
  th_trace_free(d);
  th_trace_free(c);
  th_trace_free(tr);
  /* dataflow: a consumer in between (maximum is not fusible) seals the region — it must run before the
   * consumer — but later bsyms that read nothing made from the consumer on still join it */
  tr = parse("def computation(a, b):\n"
             "  # a: \"cpu f32[4]\"\n  # b: \"cpu f32[4]\"\n"
             "  t0 = prims.add(a, b)\n  t1 = prims.maximum(t0, b)\n  t2 = prims.mul(t0, 2.0)\n"
             "  t3 = prims.sub(t1, t2)\n  t4 = prims.neg(t3)\n  return (t1, t4)\n");
  d = partition(tr, TH_FUSER_DATAFLOW);
  char *txt = print(d);
  assert_int_equal(d->bsyms.n, 4);
  assert_non_null(strstr(txt, "[t0, t2] = fusion0(a, b)")); /* add and mul, before maximum */
  assert_int_equal(bsym_at(d, 1)->sym->id, TH_OP_prims_maximum);
  /* sub reads maximum's output: it cannot run before maximum, so it starts the next region */
  assert_non_null(strstr(txt, "[t4] = fusion1(t1, t2)"));
  free(txt);
  th_trace_free(d);
  c = partition(tr, TH_FUSER_CONSECUTIVE);
  assert_int_equal(c->bsyms.n, 4); /* add alone, maximum, then [mul, sub, neg] adjacent, return */
  assert_int_equal(bsym_at(c, 0)->sym->id, TH_OP_prims_add);
  assert_int_equal(bsym_at(c, 1)->sym->id, TH_OP_prims_maximum);
  th_trace_free(c);
  th_trace_free(tr);
}

/* dataflow: the bf16 rounding of a GEMM result is sunk to its first reader, so it does not end a region
 * that later independent work can still join (a weight gradient's convert between a recomputed GELU
 * and its gradient) */
static void test_gemm_convert_sunk(void **state) {
  (void)state;
  th_trace *tr = parse("def computation(x, w):\n"
                       "  # x: \"cpu f32[2, 2]\"\n  # w: \"cpu f32[2, 2]\"\n"
                       "  t0 = prims.mul(x, 2.0)\n  t1 = prims.matmul(t0, w)\n"
                       "  t2 = prims.convert_element_type(t1, dtypes.bfloat16)\n  t3 = prims.sin(t0)\n"
                       "  t4 = prims.neg(t3)\n  return (t2, t4)\n");
  th_trace *d = partition(tr, TH_FUSER_DATAFLOW);
  char *txt = print(d);
  assert_int_equal(d->bsyms.n, 4);
  assert_non_null(strstr(txt, "[t0, t4] = fusion0(x)")); /* mul, sin, neg: one region before the GEMM */
  assert_int_equal(bsym_at(d, 1)->sym->id, TH_OP_prims_matmul);
  assert_int_equal(bsym_at(d, 2)->sym->id, TH_OP_prims_convert_element_type); /* sunk to the return */
  assert_int_equal(bsym_at(d, 3)->sym->id, TH_OP_prims_python_return);
  free(txt);
  th_trace_free(d);
  th_trace_free(tr);
}

static void test_copy_never_moved(void **state) {
  (void)state;
  th_trace *tr = parse("def computation(a):\n  # a: \"cpu f32[4]\"\n"
                       "  t0 = prims.add(a, 1.0)\n  t1 = prims.mul(t0, 2.0)\n  t2 = prims.copy_(t1, a)\n"
                       "  t3 = prims.neg(t0)\n  t4 = prims.sin(t3)\n  return t4\n");
  for (int s = 0; s < 2; s++) {
    th_trace *p = partition(tr, (th_fuser_strategy)s);
    assert_int_equal(p->bsyms.n, 4);
    assert_int_equal(bsym_at(p, 0)->sym->id, TH_OP_DYNAMIC);
    assert_int_equal(bsym_at(p, 1)->sym->id, TH_OP_prims_copy_);
    assert_int_equal(bsym_at(p, 2)->sym->id, TH_OP_DYNAMIC);
    assert_int_equal(bsym_at(p, 2)->subs[0]->sym->id, TH_OP_prims_neg);
    assert_int_equal(bsym_at(p, 3)->sym->id, TH_OP_prims_python_return);
    th_trace_free(p);
  }
  th_trace_free(tr);
  /* seed 004, a += 1: add, copy_, return a — nothing to fuse, nothing moves, RETURN last */
  tr = parse("def computation(a):\n  # a: \"cpu i64[]\"\n  t0 = prims.add(a, 1)\n  t1 = prims.copy_(t0, a)\n"
             "  return a\n");
  for (int s = 0; s < 2; s++) {
    th_trace *p = partition(tr, (th_fuser_strategy)s);
    assert_int_equal(p->bsyms.n, 3);
    assert_int_equal(bsym_at(p, 0)->sym->id, TH_OP_prims_add);
    assert_int_equal(bsym_at(p, 1)->sym->id, TH_OP_prims_copy_);
    assert_int_equal(bsym_at(p, 2)->sym->id, TH_OP_prims_python_return);
    th_trace_free(p);
  }
  th_trace_free(tr);
}

/* Seed 004 with work to fuse around the copy_: regions never cross it, RETURN stays last. */
static void test_regions_around_inplace_copy(void **state) {
  (void)state;
  th_trace *tr = parse("def computation(a, b):\n  # a: \"cpu f32[4]\"\n  # b: \"cpu f32[4]\"\n"
                       "  t0 = prims.add(a, 1.0)\n  t1 = prims.mul(t0, b)\n  t2 = prims.copy_(t1, a)\n"
                       "  t3 = prims.sin(a)\n  t4 = prims.neg(t3)\n  return (a, t4)\n");
  for (int s = 0; s < 2; s++) {
    th_trace *p = partition(tr, (th_fuser_strategy)s);
    assert_int_equal(p->bsyms.n, 4);
    assert_int_equal(bsym_at(p, 0)->sym->id, TH_OP_DYNAMIC);
    assert_int_equal(bsym_at(p, 0)->subs[1]->sym->id, TH_OP_prims_mul);
    assert_int_equal(bsym_at(p, 1)->sym->id, TH_OP_prims_copy_);
    assert_int_equal(bsym_at(p, 2)->sym->id, TH_OP_DYNAMIC); /* sin(a) reads a after the copy */
    assert_int_equal(bsym_at(p, 2)->subs[0]->sym->id, TH_OP_prims_sin);
    assert_int_equal(bsym_at(p, 3)->sym->id, TH_OP_prims_python_return);
    th_trace_free(p);
  }
  /* and it runs: a is updated in place, t4 = -sin(a + 1) * b ... of the updated a */
  th_program *prog = compile_with(tr, with_fuser, 3);
  int64_t shape[1] = {4};
  th_tensor *a = th_tensor_empty(TH_F32, 1, shape), *b = th_tensor_empty(TH_F32, 1, shape);
  for (int i = 0; i < 4; i++) ((float *)th_tensor_data(a))[i] = (float)i, ((float *)th_tensor_data(b))[i] = 0.5f;
  th_tensor *in[2] = {a, b}, **out = NULL;
  int nout = 0;
  assert_int_equal(th_program_run(prog, 2, in, &nout, &out), TH_OK);
  for (int i = 0; i < 4; i++) {
    float na = ((float)i + 1.0f) * 0.5f;
    assert_true(((float *)th_tensor_data(a))[i] == na);
    assert_float_equal(th_tensor_get_f64(out[1], i), -sin((double)na), 1e-6);
  }
  for (int i = 0; i < nout; i++) th_tensor_release(out[i]);
  free(out);
  th_tensor_release(a);
  th_tensor_release(b);
  th_program_free(prog);
  th_trace_free(tr);
}

/* A random op is an effect: nothing moves across it, so no region spans it. */
static void test_effects_not_crossed(void **state) {
  (void)state;
  th_trace *tr = parse("def computation(a):\n  # a: \"cpu f32[4]\"\n"
                       "  t0 = prims.add(a, 1.0)\n  t1 = prims.mul(t0, 2.0)\n"
                       "  t2 = prims.uniform((4,), 0.0, 1.0, device=devices.Device(\"cpu\"), dtype=dtypes.float32)\n"
                       "  t3 = prims.exp(t1)\n  t4 = prims.sin(t3)\n  return (t2, t4)\n");
  for (int s = 0; s < 2; s++) {
    th_trace *p = partition(tr, (th_fuser_strategy)s);
    assert_int_equal(p->bsyms.n, 4);
    assert_int_equal(bsym_at(p, 0)->sym->id, TH_OP_DYNAMIC);
    assert_int_equal(bsym_at(p, 0)->out.u.seq.n, 1); /* t1 */
    assert_int_equal(bsym_at(p, 1)->sym->id, TH_OP_prims_uniform);
    assert_int_equal(bsym_at(p, 2)->sym->id, TH_OP_DYNAMIC);
    assert_int_equal(bsym_at(p, 3)->sym->id, TH_OP_prims_python_return);
    th_trace_free(p);
  }
  th_trace_free(tr);
}

/* A non-member between members that consumes the region closes it; a later region may read both.
 * The partitioned trace is in dependency order (it verifies: every value defined before its use). */
static void test_no_cycles(void **state) {
  (void)state;
  th_trace *tr = parse("def computation(a, m):\n  # a: \"cpu f32[3, 3]\"\n  # m: \"cpu f32[3, 3]\"\n"
                       "  t0 = prims.add(a, 1.0)\n  t1 = prims.mul(t0, 3.0)\n  u = prims.matmul(m, m)\n"
                       "  t2 = prims.maximum(t1, a)\n  t3 = prims.mul(t2, 2.0)\n  t4 = prims.add(t0, t3)\n"
                       "  t5 = prims.matmul(u, t4)\n  t6 = prims.exp(t5)\n  t7 = prims.sum(t6, (0, 1))\n"
                       "  return (t7, u)\n");
  for (int s = 0; s < 2; s++) {
    th_trace *p = partition(tr, (th_fuser_strategy)s); /* verifies */
    int r = count_id(p, TH_OP_DYNAMIC);
    assert_int_equal(r, 3);
    /* maximum sits between the first two regions, the matmuls stay where they were relative to them */
    int i_max = -1, i_r0 = -1, i_r1 = -1;
    for (int i = 0; i < p->bsyms.n; i++) {
      const th_bsym *b = bsym_at(p, i);
      if (b->sym->id == TH_OP_prims_maximum) i_max = i;
      if (b->sym->id == TH_OP_DYNAMIC && i_r0 < 0)
        i_r0 = i;
      else if (b->sym->id == TH_OP_DYNAMIC && i_r1 < 0)
        i_r1 = i;
    }
    assert_true(i_r0 < i_max && i_max < i_r1);
    th_trace_free(p);
  }
  th_trace_free(tr);
}

/* Reductions join the region of the pointwise ops around them; only what leaves is an output. */
static void test_reductions_join(void **state) {
  (void)state;
  th_trace *tr = parse("def computation(x):\n  # x: \"cpu f32[6, 10]\"\n"
                       "  t0 = prims.mul(x, x)\n  t1 = prims.sum(t0, (1,))\n  t2 = prims.sqrt(t1)\n"
                       "  t3 = prims.amax(x, (0, 1))\n  t4 = prims.neg(t3)\n  return (t2, t4)\n");
  th_trace *p = partition(tr, TH_FUSER_DATAFLOW);
  assert_int_equal(p->bsyms.n, 2);
  const th_bsym *r = bsym_at(p, 0);
  assert_int_equal(r->sym->id, TH_OP_DYNAMIC);
  assert_int_equal(r->nsubs, 5);
  assert_int_equal(r->out.u.seq.n, 2); /* t2, t4: t0, t1, t3 never leave */
  th_fz_plan plan;
  assert_int_equal(th_fz_plan_build((const th_bsym *const *)r->subs, r->nsubs, &plan), TH_OK);
  assert_int_equal(plan.nnest, 2); /* rows of [6, 10], and the full reduction of x */
  assert_int_equal(plan.nest[0].r, 1);
  assert_int_equal(plan.nest[1].r, 2);
  th_fz_plan_free(&plan);
  th_trace_free(p);
  /* a reduction over the leading dims joins too, as a column nest (test_fuser_columns.c) */
  th_trace *t2 = parse("def computation(x):\n  # x: \"cpu f32[6, 10]\"\n"
                       "  t0 = prims.mul(x, x)\n  t1 = prims.sum(t0, (0,))\n  t2 = prims.sqrt(t1)\n  return t2\n");
  p = partition(t2, TH_FUSER_DATAFLOW);
  assert_int_equal(count_id(p, TH_OP_prims_sum), 0);
  assert_int_equal(p->bsyms.n, 2);
  assert_int_equal(bsym_at(p, 0)->nsubs, 3);
  th_trace_free(p);
  th_trace_free(t2);
  th_trace_free(tr);
}

/* softmax, log_softmax, layer_norm, rms_norm, var_mean: one region each, nothing left outside. */
static void test_norms_one_region(void **state) {
  (void)state;
  static const char *const progs[] = {
    "def computation(x):\n  # x: \"cpu f32[8, 33]\"\n  t0 = ltorch.softmax(x, 1)  # t0: \"cpu f32[8, 33]\"\n"
    "  return t0\n",
    "def computation(x):\n  # x: \"cpu f32[8, 33]\"\n  t0 = ltorch.log_softmax(x, 1)  # t0: \"cpu f32[8, 33]\"\n"
    "  return t0\n",
    "def computation(x, w, b):\n  # x: \"cpu f32[2, 8, 33]\"\n  # w: \"cpu f32[33]\"\n  # b: \"cpu f32[33]\"\n"
    "  t0 = ltorch.layer_norm(x, [33], w, b, 1e-05)  # t0: \"cpu f32[2, 8, 33]\"\n  return t0\n",
    "def computation(x, w):\n  # x: \"cpu f32[2, 8, 33]\"\n  # w: \"cpu f32[33]\"\n"
    "  t0 = ltorch.rms_norm(x, [33], w, 1e-06)  # t0: \"cpu f32[2, 8, 33]\"\n  return t0\n",
    "def computation(x):\n  # x: \"cpu f32[8, 33]\"\n"
    "  (t0, t1) = ltorch.var_mean(x, 1)\n  t2 = ltorch.sqrt(t0)  # t2: \"cpu f32[8]\"\n  return (t2, t1)\n",
  };
  static const th_op_id reds[][2] = {{TH_OP_prims_amax, TH_OP_prims_sum},
                                     {TH_OP_prims_amax, TH_OP_prims_sum},
                                     {TH_OP_prims_var_mean, TH_OP_prims_var_mean},
                                     {TH_OP_prims_sum, TH_OP_prims_sum},
                                     {TH_OP_prims_var_mean, TH_OP_prims_var_mean}};
  for (size_t k = 0; k < sizeof progs / sizeof *progs; k++) {
    th_trace *tr = parse(progs[k]);
    th_program *prog = compile_with(tr, with_fuser, 3);
    const th_trace *et = th_program_trace(prog);
    assert_all_fused(et, 1);
    assert_true(count_in_regions(et, reds[k][0]) >= 1);
    assert_true(count_in_regions(et, reds[k][1]) >= 1);
    th_program_free(prog);
    th_trace_free(tr);
  }
}

/* Independent chains of different shapes (an unrelated matmul between) are nests of one region. */
static void test_horizontal_merge(void **state) {
  (void)state;
  th_trace *tr = parse("def computation(a, c, m):\n  # a: \"cpu f32[4, 5]\"\n  # c: \"cpu f32[7]\"\n"
                       "  # m: \"cpu f32[3, 3]\"\n"
                       "  t0 = prims.exp(a)\n  t1 = prims.matmul(m, m)\n  t2 = prims.neg(c)\n"
                       "  t3 = prims.mul(t0, 2.0)\n  t4 = prims.sin(t2)\n  t5 = prims.sum(t3, (1,))\n"
                       "  return (t1, t5, t4)\n");
  th_trace *p = partition(tr, TH_FUSER_DATAFLOW);
  assert_int_equal(p->bsyms.n, 3);
  assert_int_equal(bsym_at(p, 0)->sym->id, TH_OP_prims_matmul);
  const th_bsym *r = bsym_at(p, 1);
  assert_int_equal(r->sym->id, TH_OP_DYNAMIC);
  assert_int_equal(r->nsubs, 5);
  th_fuser_region reg;
  th_ir_ctx *ir = th_ir_ctx_new();
  assert_int_equal(th_fuser_codegen(r, ir, &reg), TH_OK);
  assert_int_equal(reg.nnest, 2);
  th_fuser_region_clear(&reg);
  th_ir_ctx_free(ir);
  th_trace_free(p);
  /* consecutive: the matmul splits them */
  p = partition(tr, TH_FUSER_CONSECUTIVE);
  assert_int_equal(count_id(p, TH_OP_DYNAMIC), 1); /* neg, mul, sin, sum after the matmul; exp alone */
  assert_int_equal(bsym_at(p, 0)->sym->id, TH_OP_prims_exp);
  th_trace_free(p);
  th_trace_free(tr);
}

/* Seed 003 as prims (a torchao float8 linear): per-tensor amax, scale, saturating
 * casts of input and weight, the fp8 converts, the weight's transpose/clone/transpose, dequantized
 * for the matmul. Everything up to the matmul is one region; the transposed fp8 weight is written
 * transposed (contiguous); results are eager's bit for bit (every op is exact). */
static const char seed003[] =
  "def computation(input, weight):\n"
  "  # input: \"cpu bf16[16, 32]\"\n  # weight: \"cpu bf16[64, 32]\"\n"
  "  t173 = prims.convert_element_type(input, dtypes.float32)\n  t174 = prims.abs(t173)\n"
  "  t199 = prims.convert_element_type(weight, dtypes.float32)\n  t200 = prims.abs(t199)\n"
  "  t177 = prims.amax(t174, (0, 1))\n  t203 = prims.amax(t200, (0, 1))\n"
  "  t9 = prims.convert_element_type(t177, dtypes.float64)\n  t64 = prims.convert_element_type(t203, dtypes.float64)\n"
  "  t180 = prims.ne(t9, t9)\n  t181 = prims.gt(t9, 1e-12)\n  t182 = prims.where(t181, t9, 1e-12)\n"
  "  t14 = prims.where(t180, t9, t182)\n"
  "  t206 = prims.ne(t64, t64)\n  t207 = prims.gt(t64, 1e-12)\n  t208 = prims.where(t207, t64, 1e-12)\n"
  "  t68 = prims.where(t206, t64, t208)\n"
  "  res = prims.div(448.0, t14)\n  scale = prims.convert_element_type(res, dtypes.float32)\n"
  "  t187 = prims.broadcast_in_dim(scale, (16, 32), ())\n  t188 = prims.mul(t173, t187)\n"
  "  t69 = prims.div(448.0, t68)\n  weight_scale = prims.convert_element_type(t69, dtypes.float32)\n"
  "  t213 = prims.broadcast_in_dim(weight_scale, (64, 32), ())\n  t214 = prims.mul(t199, t213)\n"
  "  t247 = prims.reciprocal(scale)\n"
  "  t189 = prims.ne(t188, t188)\n  t190 = prims.gt(t188, -448.0)\n  t191 = prims.where(t190, t188, -448.0)\n"
  "  t192 = prims.where(t189, t188, t191)\n  t193 = prims.ne(t192, t192)\n  t194 = prims.lt(t192, 448.0)\n"
  "  t195 = prims.where(t194, t192, 448.0)\n  t196 = prims.where(t193, t192, t195)\n"
  "  t248 = prims.reciprocal(weight_scale)\n"
  "  t215 = prims.ne(t214, t214)\n  t216 = prims.gt(t214, -448.0)\n  t217 = prims.where(t216, t214, -448.0)\n"
  "  t218 = prims.where(t215, t214, t217)\n  t219 = prims.ne(t218, t218)\n  t220 = prims.lt(t218, 448.0)\n"
  "  t221 = prims.where(t220, t218, 448.0)\n  t222 = prims.where(t219, t218, t221)\n"
  "  t197 = prims.convert_element_type(t196, dtypes.float8_e4m3fn)\n"
  "  t223 = prims.convert_element_type(t222, dtypes.float8_e4m3fn)\n"
  "  t241 = prims.reshape(t197, (16, 32))\n  t234 = prims.transpose(t223, (1, 0))\n"
  "  t244 = prims.transpose(t234, (1, 0))\n  t245 = prims.clone(t244)\n  t246 = prims.transpose(t245, (1, 0))\n"
  "  a16 = prims.convert_element_type(t241, dtypes.float32)\n  b16 = prims.convert_element_type(t246, dtypes.float32)\n"
  "  t249 = prims.matmul(a16, b16)\n"
  "  return (t249, t241, t246, t247, t248)\n";

static void test_fp8_scaling_one_region(void **state) {
  (void)state;
  th_trace *tr = parse(seed003);
  for (int s = 0; s < 2; s++) {
    th_trace *p = partition(tr, (th_fuser_strategy)s);
    assert_int_equal(p->bsyms.n, 3); /* fusion0, the matmul, return */
    const th_bsym *r = bsym_at(p, 0);
    assert_int_equal(r->sym->id, TH_OP_DYNAMIC);
    assert_int_equal(bsym_at(p, 1)->sym->id, TH_OP_prims_matmul);
    int amax = 0, fp8 = 0, layout = 0;
    for (int j = 0; j < r->nsubs; j++) {
      th_op_id id = r->subs[j]->sym->id;
      amax += id == TH_OP_prims_amax;
      fp8 += id == TH_OP_prims_convert_element_type && th_dtype_is_fp8(r->subs[j]->out.u.value->dtype);
      layout += id == TH_OP_prims_transpose || id == TH_OP_prims_clone || id == TH_OP_prims_reshape;
    }
    assert_int_equal(amax, 2);
    assert_int_equal(fp8, 2);
    assert_int_equal(layout, 5);
    th_trace_free(p);
  }
  th_tensor *in[2];
  int64_t s0[2] = {16, 32}, s1[2] = {64, 32};
  in[0] = th_tensor_empty(TH_BF16, 2, s0);
  in[1] = th_tensor_empty(TH_BF16, 2, s1);
  for (int k = 0; k < 2; k++)
    for (int64_t i = 0; i < th_tensor_numel(in[k]); i++)
      ((uint16_t *)th_tensor_data(in[k]))[i] = th_f32_to_bf16((float)((int)(rnd() % 2001) - 1000) / 37.0f);
  static const char *const eager[] = {"eager"};
  th_program *pe = compile_with(tr, eager, 1), *pf = compile_with(tr, with_fuser, 3);
  assert_int_equal(count_id(th_program_trace(pf), TH_OP_DYNAMIC), 1);
  th_tensor **oe = NULL, **of = NULL;
  int ne = 0, nf = 0;
  assert_int_equal(th_program_run(pe, 2, in, &ne, &oe), TH_OK);
  assert_int_equal(th_program_run(pf, 2, in, &nf, &of), TH_OK);
  assert_int_equal(ne, nf);
  for (int o = 0; o < ne; o++) { /* exact ops: equal element for element (eager's t246 is a view) */
    assert_int_equal(oe[o]->dtype, of[o]->dtype);
    for (int64_t i = 0; i < th_tensor_numel(oe[o]); i++) {
      double x = th_tensor_get_f64(oe[o], i), y = th_tensor_get_f64(of[o], i);
      if (!(x == y || (isnan(x) && isnan(y)) || (o == 0 && fabs(x - y) <= 1e-5 * (1 + fabs(x)))))
        fail_msg("output %d element %lld: eager %.9g fused %.9g", o, (long long)i, x, y);
    }
  }
  assert_true(th_tensor_is_contiguous(of[2]));  /* the transposed fp8 weight, written transposed */
  assert_false(th_tensor_is_contiguous(oe[2])); /* (eager's is a transposed view) */
  for (int o = 0; o < ne; o++) th_tensor_release(oe[o]), th_tensor_release(of[o]);
  free(oe);
  free(of);
  th_tensor_release(in[0]);
  th_tensor_release(in[1]);
  th_program_free(pe);
  th_program_free(pf);
  th_trace_free(tr);
}

/* Broadcast sinking (passes.c): causal attention's mask, `eq(bias, 0)` on [1, 1, T, T] broadcast to
 * [B, H, T, T] for a where, is recomputed after the broadcast, so the scaling, the mask and the softmax
 * are one region (the scaled scores are not a region output written and read back). Not sunk:
 * an expensive op (exp) before the broadcast, and a broadcast whose only consumer is not fusible (a
 * matmul). Outputs against the eager executor: the exact parts bit for bit, the softmax within 1e-6. */
static void test_broadcast_sinking(void **state) {
  (void)state;
  static const char *const fused[] = {"fuser", "blas", "eager"}, *const eager[] = {"blas", "eager"};
  th_trace *tr = parse("def computation(x, bias, e):\n  # x: \"cpu f32[2, 3, 16, 16]\"\n"
                       "  # bias: \"cpu f32[1, 1, 16, 16]\"\n  # e: \"cpu f32[3, 16, 16]\"\n"
                       "  s = prims.mul(x, 0.25)\n  m = prims.eq(bias, 0.0)\n"
                       "  mb = prims.broadcast_in_dim(m, (2, 3, 16, 16), (0, 1, 2, 3))\n"
                       "  w = prims.where(mb, -float('inf'), s)\n  t0 = prims.amax(w, (3,))\n"
                       "  t1 = prims.broadcast_in_dim(t0, (2, 3, 16, 16), (0, 1, 2))\n  t2 = prims.sub(w, t1)\n"
                       "  t3 = prims.exp(t2)\n  t4 = prims.sum(t3, (3,))\n"
                       "  t5 = prims.broadcast_in_dim(t4, (2, 3, 16, 16), (0, 1, 2))\n  y = prims.div(t3, t5)\n"
                       "  ee = prims.exp(e)\n  eb = prims.broadcast_in_dim(ee, (2, 3, 16, 16), (1, 2, 3))\n"
                       "  z = prims.add(eb, x)\n  c = prims.neg(bias)\n"
                       "  cb = prims.broadcast_in_dim(c, (2, 3, 16, 16), (0, 1, 2, 3))\n"
                       "  mm = prims.matmul(cb, x)\n  return (y, w, z, mm)\n");
  th_program *p = compile_with(tr, fused, 3);
  const th_trace *et = th_program_trace(p);
  /* the attention part is one region holding the eq (sunk) and the mul; exp(e) and the matmul's
   * neg(bias) stay unsunk: exp(e) is a region member of its own nest or eager, neg(bias) is not moved */
  assert_int_equal(count_in_regions(et, TH_OP_prims_eq), 1);
  assert_int_equal(count_in_regions(et, TH_OP_prims_mul), 1);
  const th_bsym *att = NULL;
  for (int i = 0; i < et->bsyms.n; i++) {
    const th_bsym *b = bsym_at(et, i);
    if (b->sym->id != TH_OP_DYNAMIC) continue;
    bool has_eq = false, has_sum = false;
    for (int j = 0; j < b->nsubs; j++) {
      has_eq |= b->subs[j]->sym->id == TH_OP_prims_eq;
      has_sum |= b->subs[j]->sym->id == TH_OP_prims_sum;
    }
    if (has_eq) {
      assert_true(has_sum); /* the mask is computed in the softmax's region */
      att = b;
      /* the eq reads a broadcast of the input bias (and no computed value is broadcast to it) */
      for (int j = 0; j < b->nsubs; j++)
        if (b->subs[j]->sym->id == TH_OP_prims_eq) {
          const th_value *a = b->subs[j]->args[0].u.value;
          assert_int_equal(th_value_ndim(a), 4);
          assert_int_equal(th_value_shape(a)[0], 2);
        }
    }
  }
  assert_non_null(att);
  /* exp(e) and neg(bias) still run on their own shapes (3-D / [1, 1, 16, 16]), wherever they run */
  int exp_e = 0, neg = 0;
  for (int i = 0; i < et->bsyms.n; i++) {
    const th_bsym *b = bsym_at(et, i);
    int n = b->sym->id == TH_OP_DYNAMIC ? b->nsubs : 1;
    for (int j = 0; j < n; j++) {
      const th_bsym *x = b->sym->id == TH_OP_DYNAMIC ? b->subs[j] : b;
      const th_value *o = x->out.kind == TH_ARG_VALUE ? x->out.u.value : NULL;
      if (x->sym->id == TH_OP_prims_exp && th_value_ndim(x->args[0].u.value) == 3) exp_e += th_value_ndim(o) == 3;
      if (x->sym->id == TH_OP_prims_exp) assert_true(th_value_ndim(x->args[0].u.value) == th_value_ndim(o));
      if (x->sym->id == TH_OP_prims_neg) neg += th_value_shape(o)[0] == 1;
      if (x->sym->id == TH_OP_prims_neg) assert_int_equal(th_value_shape(o)[0], 1);
    }
  }
  assert_int_equal(exp_e, 1);
  assert_int_equal(neg, 1);
  th_program_free(p);
  th_tensor *in[3];
  int64_t sx[4] = {2, 3, 16, 16}, sb[4] = {1, 1, 16, 16}, se[3] = {3, 16, 16};
  in[0] = th_tensor_new(TH_F32, 4, sx);
  in[1] = th_tensor_new(TH_F32, 4, sb);
  in[2] = th_tensor_new(TH_F32, 3, se);
  float *xd = th_tensor_data(in[0]), *bd = th_tensor_data(in[1]), *ed = th_tensor_data(in[2]);
  for (int i = 0; i < 2 * 3 * 16 * 16; i++) xd[i] = (float)((i * 37) % 101) / 25.0f - 2.0f;
  for (int i = 0; i < 16 * 16; i++) bd[i] = (i % 16) <= (i / 16) ? 1.0f : 0.0f; /* a causal tril */
  for (int i = 0; i < 3 * 16 * 16; i++) ed[i] = (float)(i % 7) / 7.0f;
  int nf = 0, ne = 0;
  th_tensor **of = run_with(tr, fused, 3, in, 3, &nf), **oe = run_with(tr, eager, 2, in, 3, &ne);
  assert_int_equal(nf, 4);
  assert_memory_equal(th_tensor_data(of[1]), th_tensor_data(oe[1]), sizeof(float) * 2 * 3 * 16 * 16); /* w: exact */
  assert_memory_equal(th_tensor_data(of[3]), th_tensor_data(oe[3]), sizeof(float) * 2 * 3 * 16 * 16); /* matmul */
  const float *yf = th_tensor_data(of[0]), *ye = th_tensor_data(oe[0]), *zf = th_tensor_data(of[2]),
              *ze = th_tensor_data(oe[2]);
  for (int i = 0; i < 2 * 3 * 16 * 16; i++) {
    if (!(fabsf(yf[i] - ye[i]) <= 1e-6f)) fail_msg("softmax element %d: fused %g, eager %g", i, yf[i], ye[i]);
    if (!(fabsf(zf[i] - ze[i]) <= 1e-6f * fabsf(ze[i])))
      fail_msg("exp(e) + x element %d: fused %g, eager %g", i, zf[i], ze[i]);
    if ((i % 16) > ((i / 16) % 16)) assert_true(yf[i] == 0.0f); /* masked: exactly 0 */
  }
  for (int i = 0; i < 4; i++) th_tensor_release(of[i]), th_tensor_release(oe[i]);
  free(of);
  free(oe);
  for (int i = 0; i < 3; i++) th_tensor_release(in[i]);
  th_trace_free(tr);
  /* an operand used twice is sunk once: 10 chained `t = add(t, t)` (and where(t, t, t)) give 10 adds
   * after the broadcast, not 2^8 broadcasts and adds (3^8 for the where chain) */
  char text[2048] = "def computation(a, c, m):\n  # a: \"cpu f32[4]\"\n  # c: \"cpu f32[5, 4]\"\n  # m: \"cpu b8[4]\"\n"
                    "  t0 = prims.add(a, a)\n  w0 = prims.where(m, m, m)\n";
  for (int k = 1; k < 10; k++)
    snprintf(text + strlen(text), sizeof text - strlen(text),
             "  t%d = prims.add(t%d, t%d)\n  w%d = prims.where(w%d, w%d, w%d)\n", k, k - 1, k - 1, k, k - 1, k - 1,
             k - 1);
  snprintf(text + strlen(text), sizeof text - strlen(text),
           "  b = prims.broadcast_in_dim(t9, (5, 4), (1,))\n  wb = prims.broadcast_in_dim(w9, (5, 4), (1,))\n"
           "  y = prims.add(b, c)\n  z = prims.where(wb, y, c)\n  return z\n");
  tr = parse(text);
  p = compile_with(tr, fused, 3);
  et = th_program_trace(p);
  int nadd = count_in_regions(et, TH_OP_prims_add) + count_id(et, TH_OP_prims_add),
      nwhere = count_in_regions(et, TH_OP_prims_where) + count_id(et, TH_OP_prims_where);
  if (nadd > 12 || nwhere > 12) fail_msg("sinking duplicated shared operands: %d adds, %d wheres", nadd, nwhere);
  th_program_free(p);
  th_trace_free(tr);
}

/* t0 = -a is computed before copy_(b, a) overwrites a; the broadcast of t0 after the copy must still see
 * the old a (sinking the broadcast below neg recomputes -a after the copy). */
static void test_sinking_respects_copy(void **state) {
  (void)state;
  th_trace *tr = parse("def computation(a, b, c):\n"
                       "  # a: \"cpu f32[4]\"\n  # b: \"cpu f32[4]\"\n  # c: \"cpu f32[3, 4]\"\n"
                       "  t0 = prims.neg(a)\n  t1 = prims.copy_(b, a)\n"
                       "  t2 = prims.broadcast_in_dim(t0, (3, 4), (1,))\n  t3 = prims.add(t2, c)\n"
                       "  return (t3, t1)\n");
  int64_t s1[1] = {4}, s2[2] = {3, 4};
  th_tensor *a = th_tensor_new(TH_F32, 1, s1), *b = th_tensor_new(TH_F32, 1, s1), *c = th_tensor_new(TH_F32, 2, s2);
  for (int i = 0; i < 4; i++) ((float *)th_tensor_data(a))[i] = (float)i, ((float *)th_tensor_data(b))[i] = 10.0f;
  for (int i = 0; i < 12; i++) ((float *)th_tensor_data(c))[i] = 0.0f;
  th_tensor *in[3] = {a, b, c};
  int n = 0;
  th_tensor **out = run_fused(tr, in, 3, &n, false);
  for (int i = 0; i < 12; i++) assert_true(((float *)th_tensor_data(out[0]))[i] == -(float)(i % 4));
  release_all(out, n);
  th_tensor_release(a);
  th_tensor_release(b);
  th_tensor_release(c);
  th_trace_free(tr);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_chain_one_region),
    cmocka_unit_test(test_dataflow_vs_consecutive),
    cmocka_unit_test(test_gemm_convert_sunk),
    cmocka_unit_test(test_copy_never_moved),
    cmocka_unit_test(test_regions_around_inplace_copy),
    cmocka_unit_test(test_effects_not_crossed),
    cmocka_unit_test(test_no_cycles),
    cmocka_unit_test(test_reductions_join),
    cmocka_unit_test(test_norms_one_region),
    cmocka_unit_test(test_horizontal_merge),
    cmocka_unit_test(test_fp8_scaling_one_region),
    cmocka_unit_test(test_broadcast_sinking),
    cmocka_unit_test(test_sinking_respects_copy),
  };
  return cmocka_run_group_tests(tests, setup_cache, NULL);
}
