/* codegen_columns.c — lowering a column nest (nest.c: col, the first r dims reduced) to the loop IR,
 * for codegen.c (th_fuser_codegen), with the helpers of codegen.h.
 *
 * The first r dims reduced (x.sum(0), bias gradients, a bf16 column sum's convert): each thread takes a
 * contiguous range of the reduced index and walks its part of the input row by row (contiguous along
 * the kept dims: the `omp simd` loop runs over the last kept dim), folding every element into its own
 * accumulator row: nacc arrays of ncols 8-byte slots per thread in the launcher's scratch P[NS]
 * (S[NT] threads' worth). FULL outputs that need no column result are stored in the same walk. Then one
 * loop over the columns merges the threads' accumulators in thread order and computes the columns'
 * ROW values (ROW reads at the column's kept index) and stores the ROW outputs. var/var_mean run
 * Welford per column (u += d / count, q += d (x - u)) and merge the threads with Chan et al.'s formula,
 * as eager's column path. One walk: nest.c refuses a column result broadcast back over the domain. */
#include "executors/fuser/codegen.h"

/* Accumulator a of thread t as an lvalue array: "((type *)(W + ((int64_t)t * NACC + a) * ncols))". */
static const char *col_acc(lower *L, const char *type, const char *t, int a, int nacc) {
  return S(L, "((%s *)(W + ((int64_t)(%s) * %d + %d) * ncols))", type, t, nacc, a);
}

static void emit_update_col(lower *L, th_ir *blk, int i, const acc_decl *ad, int nad, const char *K) {
  const th_fz_mem *m = &L->p->mem[i];
  const char *x = th_cg_operand(L, m, 0);
  bool fl = dclass(m->b->args[0].u.value->dtype) != 2;
  const char *a0 = S(L, "%s_c[%s]", ad[0].name, K);
  switch (m->b->sym->id) {
    case TH_OP_prims_var:
    case TH_OP_prims_var_mean: { /* d = x - u; u += d / count; q += d (x - u) */
      const char *q = S(L, "%s_c[%s]", ad[1].name, K);
      th_ir_let(L->ir, blk, "double", S(L, "dw%d", i), S(L, "(double)%s - %s", x, a0));
      th_ir_set(L->ir, blk, a0, "+=", S(L, "dw%d * rk", i));
      th_ir_set(L->ir, blk, q, "+=", S(L, "dw%d * ((double)%s - %s)", i, x, a0));
      break;
    }
    case TH_OP_prims_sum: th_ir_set(L->ir, blk, a0, "+=", fl ? S(L, "(double)%s", x) : x); break;
    case TH_OP_prims_prod: th_ir_set(L->ir, blk, a0, "*=", fl ? S(L, "(double)%s", x) : x); break;
    default: { /* amax, amin: the prelude's bit select (a ?: leaves the loop scalar at -O1) */
      const char *cmp = m->b->sym->id == TH_OP_prims_amax ? ">" : "<";
      th_ir_set(L->ir, blk, a0, "=", S(L, "th_fz_where(%s %s %s, %s, %s)", x, cmp, a0, x, a0));
      if (nad > 1) th_ir_set(L->ir, blk, S(L, "%s_c[%s]", ad[1].name, K), "|=", S(L, "%s != %s", x, x));
      break;
    }
  }
}

/* N: the region's copy of the nest (its nacc is set here, for the launcher's scratch). */
void th_cg_lower_cols(lower *L, th_ir *blk, th_fz_nest *N, int first, int nslots) {
  int nd = N->nd, r = N->r;
  th_strbuf sb;
  /* the reductions and their accumulators (all in pass 1) */
  int red[32], nred = 0;
  acc_decl ad[32][2];
  int nad[32], nacc = 0;
  bool any_var = false;
  for (int i = 0; i < L->p->nmem && nred < 32; i++) {
    const th_fz_mem *m = &L->p->mem[i];
    if (m->nest != L->nest || m->kind != TH_FZ_REDUCE) continue;
    if (two_pass(m->b->sym->id)) { /* var, var_mean: Welford per column, the running mean u and m2 q */
      ad[nred][0] = (acc_decl){"double", S(L, "u%d", i), "0", NULL};
      ad[nred][1] = (acc_decl){"double", S(L, "q%d", i), "0", NULL};
      nad[nred] = 2;
      any_var = true;
    } else {
      nad[nred] = th_cg_accs(L, i, false, ad[nred]);
    }
    nacc += nad[nred];
    red[nred++] = i;
  }
  N->nacc = nacc;
  th_ir_let(L->ir, blk, "int64_t", "nred", th_cg_dims_product(L, 0, r));
  th_ir_let(L->ir, blk, "int64_t", "ncols", th_cg_dims_product(L, r, nd));
  th_ir_let(L->ir, blk, "int64_t", "ninner", S(L, "D[%d]", nd - 1));
  th_ir *run = th_ir_if(L->ir, blk, "ncols > 0", NULL);
  th_ir_let(L->ir, run, "int64_t", "nko", "ncols / ninner");
  /* ic: every walked slot is contiguous along the last kept dim */
  th_ir_var(L->ir, run, "int", "ic", "1");
  for (int s = first; s < first + nslots; s++) {
    if (!th_cg_slot_walked(L, s, NULL, NULL)) continue;
    th_ir_set(L->ir, run, "ic", "&=", S(L, "D[%d] <= 1 || T[%d] == 1", nd - 1, s * TH_MAX_DIMS + nd - 1));
  }
  th_ir_var(L->ir, run, "double *const", "W", S(L, "(double *)P[%d]", L->scratch_slot));
  th_ir_var(L->ir, run, "int64_t", "nt", S(L, "nred * ncols >= 32768 ? S[%d] : 1", L->nt_at));
  th_ir_set(L->ir, run, "nt", "=", "nt < nred ? nt : (nred > 0 ? nred : 1)");
  /* the walk: thread t's range of the reduced index */
  /* the team may be smaller than asked (OMP_DYNAMIC, OMP_THREAD_LIMIT, a nested region): its size is
   * recorded, and only the rows of threads that ran are merged */
  th_ir_var(L->ir, run, "int64_t", "nteam", "1");
  th_ir *pb = th_ir_parallel(L->ir, run, "num_threads(nt)");
  th_ir_let(L->ir, pb, "int64_t", "t", "omp_get_thread_num()");
  th_ir_let(L->ir, pb, "int64_t", "tn", "omp_get_num_threads()");
  th_ir *t0 = th_ir_if(L->ir, pb, "t == 0", NULL);
  th_ir_set(L->ir, t0, "nteam", "=", "tn");
  th_ir_let(L->ir, pb, "int64_t", "r0", "nred * t / tn");
  th_ir_let(L->ir, pb, "int64_t", "r1", "nred * (t + 1) / tn");
  for (int k = 0, a = 0; k < nred; k++)
    for (int q = 0; q < nad[k]; q++, a++) {
      th_ir_var(L->ir, pb, S(L, "%s *restrict", ad[k][q].type), S(L, "%s_c", ad[k][q].name),
                col_acc(L, ad[k][q].type, "t", a, nacc));
      th_ir *li = th_ir_loop(L->ir, pb, TH_IR_SIMD, "k", "0", "ncols", NULL, NULL);
      th_ir_set(L->ir, li, S(L, "%s_c[k]", ad[k][q].name), "=", ad[k][q].init);
    }
  th_ir *lr = th_ir_loop(L->ir, pb, TH_IR_SERIAL, "rr", "r0", "r1", NULL, NULL);
  if (any_var) th_ir_let(L->ir, lr, "double", "rk", "1.0 / (double)(rr - r0 + 1)"); /* Welford's 1 / count */
  th_cg_emit_unflatten(L, lr, "rr", "o", 0, r);
  th_ir *lk = th_ir_loop(L->ir, lr, TH_IR_SERIAL, "ko", "0", "nko", NULL, NULL);
  th_cg_emit_unflatten(L, lk, "ko", "o", r, nd - 1);
  th_ir_let(L->ir, lk, "int64_t", "kb", "ko * ninner");
  for (int s = first; s < first + nslots; s++)
    if (th_cg_slot_walked(L, s, NULL, NULL))
      th_ir_let(L->ir, lk, "int64_t", S(L, "b%d", s), th_cg_offset_expr(L, s, "o", 0, nd - 1));
  /* what the walk computes: the reductions' operands and the FULL outputs */
  th_cg_mark_pass(L, red, nred, false);
  for (int v = 0; v < L->p->nval; v++)
    if (L->val_slot[v] >= 0 && mem_of(L, v)->nest == L->nest && val(L, v)->lv == TH_FZ_FULL) th_cg_mark(L, v);
  th_ir *els = NULL;
  th_ir *con = th_ir_if(L->ir, lk, "ic", &els);
  th_ir *lc = th_ir_loop(L->ir, con, TH_IR_SIMD, "j", "0", "ninner", NULL, NULL);
  index_mode ic = {"b", "j", true, nd - 1};
  th_cg_emit_full_values(L, lc, &ic);
  for (int k = 0; k < nred; k++) emit_update_col(L, lc, red[k], ad[k], nad[k], "kb + j");
  th_cg_emit_full_stores(L, lc, &ic);
  th_ir *ls = th_ir_loop(L->ir, els, TH_IR_SERIAL, "j", "0", "ninner", NULL, NULL);
  index_mode is = {"b", "j", false, nd - 1};
  th_cg_emit_full_values(L, ls, &is);
  for (int k = 0; k < nred; k++) emit_update_col(L, ls, red[k], ad[k], nad[k], "kb + j");
  th_cg_emit_full_stores(L, ls, &is);
  /* the columns: merge in thread order, ROW values, ROW outputs */
  th_ir *lm = th_ir_loop(L->ir, run, TH_IR_PARALLEL, "row", "0", "ncols", NULL, "ncols >= 4096");
  for (int k = 0, a = 0; k < nred; k++) {
    const th_fz_mem *m = &L->p->mem[red[k]];
    for (int q = 0; q < nad[k]; q++, a++)
      th_ir_var(L->ir, lm, ad[k][q].type, ad[k][q].name, S(L, "%s[row]", col_acc(L, ad[k][q].type, "0", a, nacc)));
    if (two_pass(m->b->sym->id)) {
      /* Chan et al.: thread t's rows [nred t / nteam, nred (t + 1) / nteam) merged into threads 0..t-1's */
      int i = red[k];
      const char *u = ad[k][0].name, *q = ad[k][1].name;
      th_ir_var(L->ir, lm, "double", S(L, "na%d", i), "(double)(nred / nteam)");
      th_ir *lt = th_ir_loop(L->ir, lm, TH_IR_SERIAL, "t", "1", "nteam", NULL, NULL);
      th_ir_let(L->ir, lt, "double", "nb", "(double)(nred * (t + 1) / nteam - nred * t / nteam)");
      th_ir_let(L->ir, lt, "double", "nab", S(L, "na%d + nb", i));
      th_ir_let(L->ir, lt, "double", "dl", S(L, "%s[row] - %s", col_acc(L, "double", "t", a - 2, nacc), u));
      th_ir_set(L->ir, lt, u, "+=", "dl * nb / nab");
      th_ir_set(L->ir, lt, q,
                "+=", S(L, "%s[row] + dl * dl * na%d * nb / nab", col_acc(L, "double", "t", a - 1, nacc), i));
      th_ir_set(L->ir, lt, S(L, "na%d", i), "=", "nab");
      continue;
    }
    th_ir *lt = th_ir_loop(L->ir, lm, TH_IR_SERIAL, "t", "1", "nteam", NULL, NULL);
    for (int q = 0; q < nad[k]; q++) {
      const char *x = S(L, "%s[row]", col_acc(L, ad[k][q].type, "t", a - nad[k] + q, nacc));
      const char *nm = ad[k][q].name;
      switch (m->b->sym->id) {
        case TH_OP_prims_sum: th_ir_set(L->ir, lt, nm, "+=", x); break;
        case TH_OP_prims_prod: th_ir_set(L->ir, lt, nm, "*=", x); break;
        default:
          if (q == 1)
            th_ir_set(L->ir, lt, nm, "|=", x);
          else
            th_ir_set(
              L->ir, lt, nm, "=",
              S(L, "th_fz_where(%s %s %s, %s, %s)", x, m->b->sym->id == TH_OP_prims_amax ? ">" : "<", nm, x, nm));
          break;
      }
    }
  }
  th_cg_emit_unflatten(L, lm, "row", "o", r, nd);
  for (int k = 0; k < L->p->nread; k++) {
    if (L->p->read[k].nest != L->nest || L->p->read[k].lv != TH_FZ_ROW) continue;
    int s = L->read_slot[k];
    th_sb_init(&sb);
    th_cg_put_load(&sb, L->p->read[k].v->dtype, s, th_cg_offset_expr(L, s, "o", r, nd));
    th_ir_let(L->ir, lm, ctype(L->p->read[k].v->dtype), S(L, "a%d", s), take(L, &sb));
  }
  th_cg_emit_row_values(L, lm, 0);
  for (int k = 0; k < nred; k++) th_cg_emit_finish(L, lm, red[k], "nred");
  th_cg_emit_row_values(L, lm, 1);
  th_cg_emit_row_values(L, lm, 2); /* after var (levels() counts its two passes) */
  th_cg_emit_row_stores(L, lm);
}
