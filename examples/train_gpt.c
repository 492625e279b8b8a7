/* train_gpt.c — training from C: a small character-level GPT built as a trace through the C API,
 * differentiated with th_transform_grad, compiled with th_program_compile (forward and backward
 * programs) and trained with AdamW written here in plain C. It prints the falling loss; the exit status
 * says whether it fell (the CTest example_train_gpt runs a few steps).
 *
 *   train_gpt [--steps N] [--batch B] [--layers L] [--lr LR] [--check] [TEXT_FILE]
 *
 * TEXT_FILE defaults to /usr/share/common-licenses/GPL-3; its bytes are the vocabulary. The model: token
 * and position embeddings, L pre-norm blocks (causal self-attention with 4 heads, a tanh-GELU MLP),
 * a final layer norm, a linear head, and the mean cross-entropy of the next character — the model of
 * examples/python/train_gpt.py, smaller (n_embd 64, block 32). One step:
 *   forward program:  (idx, targets, mask, parameters...) -> loss, saved values
 *   backward program: (saved values, d loss = 1) -> one gradient per input (None for idx, targets, mask)
 *   AdamW:            p -= lr * (m_hat / (sqrt(v_hat) + eps) + wd * p), as torch.optim.AdamW
 * --check exits 1 unless the mean loss of the last 5 steps is below 0.85 x the first step's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "thunder/thunder.h"

enum { C = 64, H = 4, T = 32, MAXL = 8 };

/* ---- recording helpers: one failing call stops the build, its message kept ----------------------------- */

static th_trace *tr;
static th_status st = TH_OK;

static th_arg call(const char *op, int n, const th_arg *args) {
  th_arg out = th_arg_none();
  if (st == TH_OK) st = th_trace_call(tr, op, n, args, 0, NULL, NULL, &out);
  return out;
}
static th_arg call2(const char *op, th_arg a, th_arg b) { return call(op, 2, (th_arg[]){a, b}); }
static th_arg call3(const char *op, th_arg a, th_arg b, th_arg c) { return call(op, 3, (th_arg[]){a, b, c}); }
static th_arg ints(int n, const int64_t *v, th_arg *items) {
  for (int i = 0; i < n; i++) items[i] = th_arg_int(v[i]);
  return th_arg_tuple(n, items);
}

/* ---- parameters -------------------------------------------------------------------------------------- */

typedef struct {
  const char *name;
  int ndim;
  int64_t shape[2];
  enum { INIT_NORMAL, INIT_ZERO, INIT_ONE } init;
  th_value *v;
  th_tensor *t, *m, *s; /* value, AdamW's first and second moments */
} param;

static param params[8 + 12 * MAXL];
static int nparams;

static th_arg add_param(const char *name, int ndim, int64_t d0, int64_t d1, int init) {
  param *p = &params[nparams++];
  static char names[8 + 12 * MAXL][32];
  snprintf(names[nparams - 1], sizeof names[0], "%s", name);
  *p = (param){names[nparams - 1], ndim, {d0, d1}, init, NULL, NULL, NULL, NULL};
  if (st == TH_OK) {
    p->v = th_trace_add_tensor_input(tr, p->name, TH_F32, (th_device){TH_CPU, 0}, ndim, p->shape);
    if (!p->v) st = th_last_status();
  }
  return p->v ? th_arg_value(p->v) : th_arg_none();
}

static th_arg linear(th_arg x, th_arg w, th_arg b) { return call3("ltorch.linear", x, w, b); }
static th_arg layer_norm(th_arg x, th_arg w, th_arg b) {
  th_arg it[1];
  return call("ltorch.layer_norm", 5, (th_arg[]){x, ints(1, (int64_t[]){C}, it), w, b, th_arg_float(1e-5)});
}

/* ---- the model as a trace ------------------------------------------------------------------------------ */

static th_status build(int B, int V, int L, th_value **idx, th_value **tgt, th_value **mask) {
  const th_device cpu = {TH_CPU, 0};
  char nm[32];
  *idx = th_trace_add_tensor_input(tr, "idx", TH_I64, cpu, 2, (int64_t[]){B, T});
  *tgt = th_trace_add_tensor_input(tr, "targets", TH_I64, cpu, 1, (int64_t[]){B * T});
  *mask = th_trace_add_tensor_input(tr, "mask", TH_F32, cpu, 4, (int64_t[]){1, 1, T, T});
  if (!*idx || !*tgt || !*mask) return th_last_status();
  th_arg wte = add_param("wte", 2, V, C, INIT_NORMAL), wpe = add_param("wpe", 2, T, C, INIT_NORMAL);
  th_arg x = call2("ltorch.add", call2("ltorch.embedding", th_arg_value(*idx), wte), wpe);
  th_arg causal = call2("ltorch.eq", th_arg_value(*mask), th_arg_int(0));
  th_arg it[4], it2[4];
  for (int l = 0; l < L; l++) {
#define P(field, nd, d0, d1, init) (snprintf(nm, sizeof nm, "h%d_" field, l), add_param(nm, nd, d0, d1, init))
    th_arg ln1w = P("ln1_weight", 1, C, 0, INIT_ONE), ln1b = P("ln1_bias", 1, C, 0, INIT_ZERO);
    th_arg qkvw = P("qkv_weight", 2, 3 * C, C, INIT_NORMAL), qkvb = P("qkv_bias", 1, 3 * C, 0, INIT_ZERO);
    th_arg projw = P("proj_weight", 2, C, C, INIT_NORMAL), projb = P("proj_bias", 1, C, 0, INIT_ZERO);
    th_arg ln2w = P("ln2_weight", 1, C, 0, INIT_ONE), ln2b = P("ln2_bias", 1, C, 0, INIT_ZERO);
    th_arg fcw = P("fc_weight", 2, 4 * C, C, INIT_NORMAL), fcb = P("fc_bias", 1, 4 * C, 0, INIT_ZERO);
    th_arg fcpw = P("fc_proj_weight", 2, C, 4 * C, INIT_NORMAL), fcpb = P("fc_proj_bias", 1, C, 0, INIT_ZERO);
#undef P
    /* causal self-attention */
    th_arg qkv = linear(layer_norm(x, ln1w, ln1b), qkvw, qkvb);
    th_arg parts = call3("ltorch.split", qkv, th_arg_int(C), th_arg_int(2));
    if (st != TH_OK) return st;
    th_arg heads[3];
    for (int i = 0; i < 3; i++)
      heads[i] =
        call3("ltorch.transpose", call2("ltorch.view", parts.u.seq.items[i], ints(4, (int64_t[]){B, T, H, C / H}, it)),
              th_arg_int(1), th_arg_int(2));
    th_arg kt = call3("ltorch.transpose", heads[1], th_arg_int(-2), th_arg_int(-1));
    th_arg att = call2("ltorch.mul", call2("ltorch.matmul", heads[0], kt), th_arg_float(1.0 / sqrt(C / H)));
    att = call3("ltorch.masked_fill", att, causal, th_arg_float(-INFINITY));
    att = call2("ltorch.softmax", att, th_arg_int(-1));
    th_arg y = call3("ltorch.transpose", call2("ltorch.matmul", att, heads[2]), th_arg_int(1), th_arg_int(2));
    y = call2("ltorch.reshape", y, ints(3, (int64_t[]){B, T, C}, it2));
    x = call2("ltorch.add", x, linear(y, projw, projb));
    /* MLP */
    th_arg h = linear(layer_norm(x, ln2w, ln2b), fcw, fcb);
    const char *kw[1] = {"approximate"};
    th_arg approx = th_arg_str("tanh"), g = th_arg_none();
    if (st == TH_OK) st = th_trace_call(tr, "ltorch.gelu", 1, &h, 1, kw, &approx, &g);
    x = call2("ltorch.add", x, linear(g, fcpw, fcpb));
  }
  th_arg lnfw = add_param("ln_f_weight", 1, C, 0, INIT_ONE), lnfb = add_param("ln_f_bias", 1, C, 0, INIT_ZERO);
  th_arg head = add_param("lm_head_weight", 2, V, C, INIT_NORMAL);
  th_arg logits = linear(layer_norm(x, lnfw, lnfb), head, th_arg_none());
  th_arg flat = call2("ltorch.reshape", logits, ints(2, (int64_t[]){B * T, V}, it));
  th_arg loss = call2("ltorch.cross_entropy", flat, th_arg_value(*tgt));
  if (st == TH_OK) st = th_trace_set_return(tr, loss);
  return st;
}

/* ---- data, initialization, AdamW ------------------------------------------------------------------------ */

static uint64_t rng = 0x9E3779B97F4A7C15u;
static uint32_t next_u32(void) { /* xorshift64* */
  rng ^= rng >> 12;
  rng ^= rng << 25;
  rng ^= rng >> 27;
  return (uint32_t)((rng * 2685821657736338717u) >> 32);
}
static float normal(void) { /* Box-Muller */
  double u1 = (next_u32() + 1.0) / 4294967297.0, u2 = next_u32() / 4294967296.0;
  return (float)(sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2));
}

static th_status init_params(void) {
  for (int i = 0; i < nparams; i++) {
    param *p = &params[i];
    p->t = th_tensor_new(TH_F32, p->ndim, p->shape);
    p->m = th_tensor_new(TH_F32, p->ndim, p->shape);
    p->s = th_tensor_new(TH_F32, p->ndim, p->shape);
    if (!p->t || !p->m || !p->s) return th_last_status();
    float *d = th_tensor_data(p->t);
    for (int64_t k = 0; k < th_tensor_numel(p->t); k++)
      d[k] = p->init == INIT_NORMAL ? 0.02f * normal() : p->init == INIT_ONE ? 1.0f : 0.0f;
  }
  return TH_OK;
}

/* torch.optim.AdamW (betas 0.9, 0.999, eps 1e-8, weight decay wd) on every parameter, step k >= 1. */
static void adamw(th_tensor *const *grads, int first_param_input, int k, float lr, float wd) {
  const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
  float c1 = 1 - powf(b1, (float)k), c2 = 1 - powf(b2, (float)k);
  for (int i = 0; i < nparams; i++) {
    th_tensor *g = grads[first_param_input + i];
    if (!g) continue;
    th_tensor *gc = th_tensor_is_contiguous(g) ? NULL : th_tensor_contiguous_copy(g);
    const float *gd = th_tensor_data(gc ? gc : g);
    float *p = th_tensor_data(params[i].t), *m = th_tensor_data(params[i].m), *v = th_tensor_data(params[i].s);
    for (int64_t j = 0; j < th_tensor_numel(params[i].t); j++) {
      p[j] *= 1 - lr * wd;
      m[j] = b1 * m[j] + (1 - b1) * gd[j];
      v[j] = b2 * v[j] + (1 - b2) * gd[j] * gd[j];
      p[j] -= lr * (m[j] / c1) / (sqrtf(v[j] / c2) + eps);
    }
    th_tensor_release(gc);
  }
}

static char *read_file(const char *path, long *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *s = NULL;
  if (fseek(f, 0, SEEK_END) == 0 && (*n = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 && (s = malloc((size_t)*n)) &&
      fread(s, 1, (size_t)*n, f) != (size_t)*n) {
    free(s);
    s = NULL;
  }
  fclose(f);
  return s;
}

int main(int argc, char **argv) {
  int steps = 200, B = 8, L = 1, check = 0;
  float lr = 3e-3f;
  const char *path = "/usr/share/common-licenses/GPL-3";
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--steps") && i + 1 < argc)
      steps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--batch") && i + 1 < argc)
      B = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--layers") && i + 1 < argc)
      L = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--lr") && i + 1 < argc)
      lr = strtof(argv[++i], NULL);
    else if (!strcmp(argv[i], "--check"))
      check = 1;
    else if (argv[i][0] != '-')
      path = argv[i];
    else {
      fprintf(stderr, "usage: train_gpt [--steps N] [--batch B] [--layers L] [--lr LR] [--check] [TEXT_FILE]\n");
      return 2;
    }
  }
  if (steps < 1 || B < 1 || L < 1 || L > MAXL) {
    fprintf(stderr, "train_gpt: --steps and --batch must be >= 1 and --layers in 1..%d\n", MAXL);
    return 2;
  }
  long n = 0;
  char *text = read_file(path, &n);
  if (!text || n < T + 2) {
    fprintf(stderr, "train_gpt: cannot read at least %d bytes from %s\n", T + 2, path);
    free(text);
    return 1;
  }
  /* the vocabulary: the bytes that occur; the unigram entropy of the text (nats) */
  int map[256], V = 0;
  long count[256] = {0};
  for (long i = 0; i < n; i++) count[(unsigned char)text[i]]++;
  double h = 0;
  for (int c = 0; c < 256; c++) {
    map[c] = count[c] ? V++ : -1;
    if (count[c]) h -= (double)count[c] / (double)n * log((double)count[c] / (double)n);
  }
  printf("text: %s (%ld bytes, vocabulary %d); unigram entropy %.4f nats\n", path, n, V, h);

  tr = th_trace_new("gpt");
  th_value *idx, *tgt, *mask;
  th_trace *fwd = NULL, *bwd = NULL;
  th_program *fp = NULL, *bp = NULL;
  th_tensor *in_idx = NULL, *in_tgt = NULL, *in_mask = NULL, **fin = NULL, **bin = NULL;
  int rc = 1;
  st = tr ? build(B, V, L, &idx, &tgt, &mask) : th_last_status();
  int nin = st == TH_OK ? th_trace_num_inputs(tr) : 0;
  bool *rg = calloc((size_t)nin + 1, 1);
  for (int i = 3; rg && i < nin; i++) rg[i] = true; /* the parameters; not idx, targets, mask */
  th_grad_options go = {rg, nin};
  th_grad_layout lay;
  if (st == TH_OK) st = th_transform_grad(tr, &go, &fwd, &bwd);
  if (st == TH_OK) st = th_grad_forward_layout(fwd, &lay);
  if (st == TH_OK) st = th_program_compile(fwd, NULL, &fp);
  if (st == TH_OK) st = th_program_compile(bwd, NULL, &bp);
  if (st == TH_OK) st = init_params();
  if (st != TH_OK) {
    fprintf(stderr, "train_gpt: %s\n", th_last_error());
    goto out;
  }
  long nweights = 0;
  for (int i = 0; i < nparams; i++) nweights += th_tensor_numel(params[i].t);
  printf("model: %d layer(s), %d heads, n_embd %d, block %d, %ld parameters; batch %d, AdamW lr %g\n", L, H, C, T,
         nweights, B, lr);
  printf("forward program: %d inputs; backward program: %d inputs (%d saved tensors, %d saved numbers, %d "
         "cotangent)\n",
         th_program_num_inputs(fp), th_program_num_inputs(bp), lay.nsaved_tensors, lay.nsaved_other, lay.nflat_output);

  in_idx = th_tensor_new(TH_I64, 2, (int64_t[]){B, T});
  in_tgt = th_tensor_new(TH_I64, 1, (int64_t[]){B * T});
  in_mask = th_tensor_new(TH_F32, 4, (int64_t[]){1, 1, T, T});
  int nb = th_program_num_inputs(bp);
  fin = calloc((size_t)nin, sizeof *fin);
  bin = calloc((size_t)nb, sizeof *bin);
  th_tensor *one = th_tensor_new(TH_F32, 0, NULL);
  if (!in_idx || !in_tgt || !in_mask || !fin || !bin || !one || nb != lay.nsaved_tensors + lay.nsaved_other + 1) {
    fprintf(stderr, "train_gpt: setup failed: %s\n", th_last_error());
    th_tensor_release(one);
    goto out;
  }
  *(float *)th_tensor_data(one) = 1.0f; /* d loss / d loss */
  for (int i = 0; i < T; i++)
    for (int j = 0; j <= i; j++) ((float *)th_tensor_data(in_mask))[i * T + j] = 1.0f;
  fin[0] = in_idx;
  fin[1] = in_tgt;
  fin[2] = in_mask;
  for (int i = 0; i < nparams; i++) fin[3 + i] = params[i].t;

  double first = 0, last5 = 0;
  int off_saved = lay.noutput + lay.nflat_args + lay.nflat_output;
  for (int step = 1; step <= steps; step++) {
    int64_t *xi = th_tensor_data(in_idx), *yi = th_tensor_data(in_tgt);
    for (int b = 0; b < B; b++) {
      long at = (long)(next_u32() % (uint32_t)(n - T - 1));
      for (int t = 0; t < T; t++) {
        xi[b * T + t] = map[(unsigned char)text[at + t]];
        yi[b * T + t] = map[(unsigned char)text[at + t + 1]];
      }
    }
    th_tensor **fo = NULL, **go_ = NULL;
    int nfo = 0, ngo = 0;
    st = th_program_run(fp, nin, fin, &nfo, &fo);
    if (st == TH_OK) {
      for (int i = 0; i < nb - 1; i++) bin[i] = fo[off_saved + i]; /* saved tensors, then saved numbers */
      bin[nb - 1] = one;
      st = th_program_run(bp, nb, bin, &ngo, &go_);
    }
    if (st == TH_OK) {
      double loss = th_tensor_get_f64(fo[0], 0);
      if (step == 1) first = loss;
      if (step > steps - 5) last5 += loss / (steps < 5 ? steps : 5);
      adamw(go_, 3, step, lr, 0.1f);
      if (step == 1 || step % 10 == 0 || step == steps) printf("step %4d  loss %.4f\n", step, loss);
    }
    for (int i = 0; i < nfo; i++) th_tensor_release(fo[i]);
    for (int i = 0; i < ngo; i++) th_tensor_release(go_[i]);
    free(fo);
    free(go_);
    if (st != TH_OK) {
      fprintf(stderr, "train_gpt: step %d: %s\n", step, th_last_error());
      th_tensor_release(one);
      goto out;
    }
  }
  th_tensor_release(one);
  printf("first loss %.4f, mean of the last steps %.4f (unigram entropy %.4f)\n", first, last5, h);
  rc = check && !(last5 < 0.85 * first) ? 1 : 0;
  if (check) printf("check: the loss %s\n", rc ? "did NOT fall enough" : "fell");
out:
  for (int i = 0; i < nparams; i++) {
    th_tensor_release(params[i].t);
    th_tensor_release(params[i].m);
    th_tensor_release(params[i].s);
  }
  th_tensor_release(in_idx);
  th_tensor_release(in_tgt);
  th_tensor_release(in_mask);
  free(fin);
  free(bin);
  free(rg);
  th_program_free(fp);
  th_program_free(bp);
  th_trace_free(fwd);
  th_trace_free(bwd);
  th_trace_free(tr);
  free(text);
  return rc;
}
