/* rng.c — a jitted function's random numbers follow torch's default CPU generator.
 *
 * A program draws from its own Philox stream (thunder/jit.h, th_program_set_rng_state), whose state
 * the frontend sets before every call from torch.default_generator, the way Thunder's
 * get_and_update_rng_state reads and advances CUDA's Philox seed and offset:
 *   - the key is the next two 32-bit words torch's Mersenne Twister (mt19937) would draw, the offset 0;
 *   - torch's generator then advances by the words eager PyTorch would draw for the same random ops,
 *     the key's two words among them: exactly for dropout (two per element: bernoulli_ on the CPU draws
 *     one 64-bit number, two mt19937 words, per element); for the samplers of torch/random.c (rand,
 *     randn, normal, multinomial, ...), whose eager word counts vary by op, dtype and size, two per
 *     uniform sample the program draws.
 * So torch.manual_seed(s) followed by a call is reproducible call after call, cached or not; two calls
 * without reseeding differ; and, for a program whose random ops are dropouts, the numbers torch draws
 * after the call are those it would draw after the eager function. The state is advanced in place in the bytes torch.Generator.get_state() returns
 * (CPUGeneratorImplState: the mt19937 words, its `left` and `next` cursors) and set back, so an
 * advance over n words costs n / 624 twists of the state, not n draws through Python. */
#include <string.h>

#include "pyth.h"

#define MT_N 624
#define MT_M 397

/* The byte layout of torch's CPU generator state (c10's CPUGeneratorImplState, 64-bit little-endian):
 * the_initial_seed u64, left i32, seeded i32, next u64, state u64[624], the cached normal samples. */
enum { ST_LEFT = 8, ST_NEXT = 16, ST_WORDS = 24, ST_SIZE = 5056 };

typedef struct {
  uint32_t s[MT_N];
  int32_t left;
  uint64_t next;
} mt_state;

static uint32_t twist_word(uint32_t u, uint32_t v, uint32_t m) {
  uint32_t y = (u & 0x80000000u) | (v & 0x7fffffffu);
  return m ^ (y >> 1) ^ ((v & 1u) ? 0x9908b0dfu : 0u);
}

/* mt19937's next_state: all 624 words at once, then the cursor at the first. */
static void mt_twist(mt_state *m) {
  uint32_t *s = m->s;
  int i = 0;
  for (; i < MT_N - MT_M; i++) s[i] = twist_word(s[i], s[i + 1], s[i + MT_M]);
  for (; i < MT_N - 1; i++) s[i] = twist_word(s[i], s[i + 1], s[i + MT_M - MT_N]);
  s[MT_N - 1] = twist_word(s[MT_N - 1], s[0], s[MT_M - 1]);
  m->left = MT_N;
  m->next = 0;
}

/* One draw (at::mt19937::operator()): twist when the words run out, then temper the next word. */
static uint32_t mt_draw(mt_state *m) {
  if (--m->left == 0) mt_twist(m);
  uint32_t y = m->s[m->next++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= y >> 18;
  return y;
}

/* n draws, their values unused. */
static void mt_skip(mt_state *m, int64_t n) {
  while (n > 0) {
    int64_t k = m->left - 1 < n ? m->left - 1 : n; /* draws before the words run out */
    m->left -= (int32_t)k;
    m->next += (uint64_t)k;
    n -= k;
    if (n > 0) {
      (void)mt_draw(m);
      n--;
    }
  }
}

static uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15u;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9u;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebu;
  return x ^ (x >> 31);
}

/* The words eager draws for b and its subsymbols: dropout draws when it samples (training, 0 < p < 1:
 * its decomposition then holds a uniform_like), two words (one 64-bit draw) per element of its input.
 * A sampling prim recorded on its own (a jitted execution trace, thunder_c.prims called directly) or in
 * another op's decomposition (the samplers of torch/random.c) counts two words per element. */
static int64_t eager_draws(const th_bsym *b) {
  const char *q = th_bsym_qualname(b);
  if (!strcmp(q, "prims.uniform_philox") || !strcmp(q, "prims.uniform")) {
    th_arg o = th_bsym_output(b);
    return o.kind == TH_ARG_VALUE ? 2 * th_value_numel(o.u.value) : 0;
  }
  bool dropout = !strcmp(q, "ltorch.dropout"), uniform = !strcmp(q, "ltorch.uniform_like");
  if (dropout || uniform) {
    bool samples = uniform;
    for (int k = 0; k < th_bsym_num_subsymbols(b) && !samples; k++)
      samples = !strcmp(th_bsym_qualname(th_bsym_subsymbol(b, k)), "ltorch.uniform_like");
    th_arg a = th_bsym_arg(b, 0);
    return samples && a.kind == TH_ARG_VALUE ? 2 * th_value_numel(a.u.value) : 0;
  }
  int64_t draws = 0;
  for (int k = 0; k < th_bsym_num_subsymbols(b); k++) draws += eager_draws(th_bsym_subsymbol(b, k));
  return draws;
}

int64_t pyth_rng_eager_draws(const th_trace *tr) {
  int64_t draws = 0;
  for (int i = 0; i < th_trace_num_bsyms(tr); i++) draws += eager_draws(th_trace_bsym(tr, i));
  return draws;
}

int pyth_rng_begin(th_program *p, int64_t draws) {
  PyObject *gen = PyObject_GetAttrString(pyth_T.torch, "default_generator");
  PyObject *state = gen ? PyObject_CallMethod(gen, "get_state", NULL) : NULL;
  PyObject *ptr = state ? PyObject_CallMethod(state, "data_ptr", NULL) : NULL;
  PyObject *nbytes = state ? PyObject_CallMethod(state, "numel", NULL) : NULL;
  int rc = -1;
  if (!ptr || !nbytes) goto done;
  unsigned char *bytes = PyLong_AsVoidPtr(ptr);
  long long size = PyLong_AsLongLong(nbytes);
  if (PyErr_Occurred()) goto done;
  mt_state m;
  int32_t left;
  if (size == ST_SIZE) {
    memcpy(&left, bytes + ST_LEFT, sizeof left);
    memcpy(&m.next, bytes + ST_NEXT, sizeof m.next);
  }
  if (size != ST_SIZE || left < 1 || left > MT_N || m.next > MT_N) {
    PyErr_Format(PyExc_RuntimeError,
                 "thunder_c: random ops: torch.default_generator.get_state() has an unknown layout (%lld bytes, "
                 "expected %d: the mt19937 state of torch's CPU generator)",
                 size, ST_SIZE);
    goto done;
  }
  m.left = left;
  for (int i = 0; i < MT_N; i++) {
    uint64_t w;
    memcpy(&w, bytes + ST_WORDS + 8 * i, sizeof w);
    m.s[i] = (uint32_t)w;
  }
  uint32_t w0 = mt_draw(&m), w1 = mt_draw(&m); /* draws >= 2: two words per sampled element */
  mt_skip(&m, draws - 2);
  uint64_t key = splitmix64(((uint64_t)w1 << 32) | w0);
  for (int i = 0; i < MT_N; i++) {
    uint64_t w = m.s[i];
    memcpy(bytes + ST_WORDS + 8 * i, &w, sizeof w);
  }
  memcpy(bytes + ST_LEFT, &m.left, sizeof m.left);
  memcpy(bytes + ST_NEXT, &m.next, sizeof m.next);
  PyObject *r = PyObject_CallMethod(gen, "set_state", "O", state);
  if (!r) goto done;
  Py_DECREF(r);
  th_status st = th_program_set_rng_state(p, key, 0);
  if (st != TH_OK) {
    pyth_raise(st);
    goto done;
  }
  rc = 0;
done:
  Py_XDECREF(nbytes);
  Py_XDECREF(ptr);
  Py_XDECREF(state);
  Py_XDECREF(gen);
  return rc;
}

PyObject *pyth_rng_snapshot(void) {
  PyObject *gen = PyObject_GetAttrString(pyth_T.torch, "default_generator");
  PyObject *state = gen ? PyObject_CallMethod(gen, "get_state", NULL) : NULL;
  Py_XDECREF(gen);
  return state;
}

int pyth_rng_unchanged(PyObject *before) {
  if (!before) return -1;
  PyObject *now = pyth_rng_snapshot();
  PyObject *same = now ? PyObject_CallMethod(pyth_T.torch, "equal", "OO", before, now) : NULL;
  Py_XDECREF(now);
  if (!same) return -1;
  int eq = PyObject_IsTrue(same);
  Py_DECREF(same);
  if (eq < 0) return -1;
  if (!eq) {
    PyErr_SetString(PyExc_NotImplementedError,
                    "thunder_c: the jitted function changed torch's default generator while it was traced "
                    "(torch.manual_seed, torch.set_rng_state, or a draw outside the supported ops): seed the "
                    "generator outside the jitted function");
    return -1;
  }
  return 0;
}
