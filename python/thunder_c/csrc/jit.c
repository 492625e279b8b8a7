/* jit.c — the jitted callable: cache lookup, compilation by tracing, and running on torch tensors.
 *
 * A call flattens its arguments (tuples, lists, dicts; for a module also its parameters and
 * buffers, read afresh every call) and exports every tensor by DLPack. The cache key is built from
 * what the DLPack records say (dtype, shape, strides, device) plus requires_grad, which inputs
 * share memory, the values of non-tensor arguments ("constant values"), the training flags of a
 * module's submodules, and the caller's autocast and grad state. A hit runs the entry's program at
 * once; a miss traces the function with proxies (proxy.c), runs the core's pipeline on the trace
 * (Dead Code Elimination, then the execution passes) and stores the entry. Inputs cross into the
 * core without a copy and outputs come back as torch tensors viewing the core's buffers (their
 * DLPack capsule owns them); an input the program updates in place is updated in the caller's
 * tensor, because the core writes into the caller's memory. When grad is enabled and an input requires
 * grad, the entry holds the grad transform's forward program and its backward (autograd.c), and the
 * outputs come back attached to PyTorch's autograd. */
#include <dlpack/dlpack.h>
#include <stdlib.h>
#include <string.h>

#include "pyth.h"

static PyObject *mode_class; /* thunder_c._ThunderMode, set by _set_mode_class */
/* thunder_c._torchao.prepare, set by _set_module_hook: called with the list of a module's submodules
 * before it is traced, returns a callable that undoes what it did (or None) */
static PyObject *module_hook;
static unsigned long epoch_counter;
static PyObject *s_requires_grad, *s_detach, *s_dtype, *s_is_neg, *s_training, *s_parameters, *s_buffers, *s_enter, *s_exit;

/* ---- growable byte buffer for keys -------------------------------------------------------------- */

typedef struct {
  char *p;
  size_t n, cap;
  char local[512];
} kbuf;

static int kb_put(kbuf *b, const void *d, size_t n) {
  if (b->n + n > b->cap) {
    size_t cap = b->cap * 2 > b->n + n ? b->cap * 2 : b->n + n + 256;
    char *q = b->p == b->local ? PyMem_Malloc(cap) : PyMem_Realloc(b->p, cap);
    if (!q) return PyErr_NoMemory(), -1;
    if (b->p == b->local) memcpy(q, b->local, b->n);
    b->p = q;
    b->cap = cap;
  }
  memcpy(b->p + b->n, d, n);
  b->n += n;
  return 0;
}
static int kb_byte(kbuf *b, char c) { return kb_put(b, &c, 1); }
static int kb_i64(kbuf *b, int64_t v) { return kb_put(b, &v, sizeof v); }
static void kb_free(kbuf *b) {
  if (b->p != b->local) PyMem_Free(b->p);
}

/* ---- the tensors of one call -------------------------------------------------------------------- */

typedef struct {
  PyObject *tensor;  /* borrowed: the caller's tensor */
  PyObject *capsule; /* owned: its DLPack export */
  DLManagedTensor *m;
  bool requires_grad;
} call_tensor;

typedef struct {
  call_tensor *t;
  int n, cap;
  call_tensor local[8];
} tensor_list;

static void tl_free(tensor_list *l) {
  for (int i = 0; i < l->n; i++) Py_XDECREF(l->t[i].capsule);
  if (l->t != l->local) PyMem_Free(l->t);
}

/* Exports torch tensor t by DLPack: a new capsule and its managed tensor. A tensor that requires grad
 * is exported detached (no autograd graph is recorded). torch labels bool and fp8 tensors with DLPack
 * 1.x's codes (kDLBool, kDLFloat8_e4m3fn, kDLFloat8_e5m2), which th_tensor_from_dlpack reads. */
static int export_tensor(PyObject *t, bool *requires_grad, PyObject **capsule, DLManagedTensor **managed) {
  if (pyth_tensor_check_class(t, "a tensor of the call (an argument, parameter or buffer)") < 0) return -1;
  PyObject *rg = PyObject_GetAttr(t, s_requires_grad);
  if (!rg) return -1;
  bool req = rg == Py_True;
  Py_DECREF(rg);
  PyObject *src = req ? PyObject_CallMethodNoArgs(t, s_detach) : Py_NewRef(t);
  if (!src) return -1;
  /* a lazily negated or conjugated view (z.conj().imag) exports its raw memory: resolve it first */
  PyObject *neg = PyObject_CallMethodNoArgs(src, s_is_neg);
  if (!neg) return Py_DECREF(src), -1;
  if (neg == Py_True) Py_SETREF(src, PyObject_CallMethod(src, "resolve_neg", NULL));
  Py_DECREF(neg);
  if (!src) return -1;
  PyObject *cap = PyObject_CallOneArg(pyth_T.to_dlpack, src);
  if (!cap) { /* torch's own message ("Cannot pack tensors on meta") names neither thunder_c nor what to do */
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    PyObject *dev = PyObject_GetAttrString(src, "device"), *ds = dev ? PyObject_Str(dev) : NULL;
    const char *d = ds ? PyUnicode_AsUTF8(ds) : NULL;
    if (d && strcmp(d, "cpu") != 0) {
      Py_XDECREF(et), Py_XDECREF(ev), Py_XDECREF(tb);
      PyErr_Format(PyExc_RuntimeError,
                   "thunder_c: an input tensor is on device '%s', which thunder_c cannot read: it executes on the "
                   "CPU and takes CPU tensors (move it with .cpu(); a meta tensor has no data to run on)",
                   d);
    } else {
      PyErr_Restore(et, ev, tb); /* torch's error as it was */
    }
    Py_XDECREF(ds);
    Py_XDECREF(dev);
  }
  Py_DECREF(src);
  if (!cap) return -1;
  DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");
  if (!m) return Py_DECREF(cap), -1;
  if (requires_grad) *requires_grad = req;
  *capsule = cap;
  *managed = m;
  return 0;
}

/* Exports tensor t by DLPack and appends it. */
static int tl_add(tensor_list *l, PyObject *t) {
  if (l->n == l->cap) {
    int cap = l->cap * 2;
    call_tensor *q = l->t == l->local ? PyMem_Malloc(sizeof *q * (size_t)cap) : PyMem_Realloc(l->t, sizeof *q * (size_t)cap);
    if (!q) return PyErr_NoMemory(), -1;
    if (l->t == l->local) memcpy(q, l->local, sizeof *q * (size_t)l->n);
    l->t = q;
    l->cap = cap;
  }
  bool req;
  PyObject *cap;
  DLManagedTensor *m;
  if (export_tensor(t, &req, &cap, &m) < 0) return -1;
  l->t[l->n++] = (call_tensor){t, cap, m, req};
  return 0;
}

static int key_tensor(kbuf *k, const call_tensor *c) {
  const DLTensor *d = &c->m->dl_tensor;
  if (kb_byte(k, 'T') < 0 || kb_put(k, &d->dtype, sizeof d->dtype) < 0 || kb_put(k, &d->device, sizeof d->device) < 0 ||
      kb_byte(k, (char)d->ndim) < 0 || kb_byte(k, c->requires_grad) < 0)
    return -1;
  int64_t acc = 1;
  for (int i = d->ndim - 1; i >= 0; i--) {
    int64_t st = d->strides ? d->strides[i] : acc;
    if (kb_i64(k, d->shape[i]) < 0 || kb_i64(k, d->shape[i] == 1 ? 0 : st) < 0) return -1;
    acc *= d->shape[i];
  }
  return 0;
}

/* [lo, hi) bytes a tensor can touch; lo == hi for an empty tensor. */
static void byte_range(const DLTensor *d, uintptr_t *lo, uintptr_t *hi) {
  int64_t span = 0, acc = 1;
  bool empty = false;
  for (int i = d->ndim - 1; i >= 0; i--) {
    if (d->shape[i] == 0) empty = true;
    int64_t st = d->strides ? d->strides[i] : acc;
    span += (d->shape[i] - 1) * st;
    acc *= d->shape[i];
  }
  *lo = (uintptr_t)d->data + d->byte_offset;
  *hi = empty ? *lo : *lo + (uintptr_t)((span + 1) * ((d->dtype.bits * d->dtype.lanes + 7) / 8));
}

/* Which inputs share memory: for each tensor, the first earlier one whose bytes overlap it. Sorted by
 * start address and swept, so a module with thousands of parameters costs n log n, not n^2. */
typedef struct {
  uintptr_t lo, hi;
  int i;
} span_t;

static int span_cmp(const void *a, const void *b) {
  const span_t *x = a, *y = b;
  return x->lo < y->lo ? -1 : x->lo > y->lo ? 1 : x->i - y->i;
}

/* first[i] = the smallest index of the run of overlapping tensors that tensor i belongs to (i itself
 * when it shares memory with no other). -1 with MemoryError. */
static int alias_roots(const tensor_list *l, int32_t *first) {
  for (int i = 0; i < l->n; i++) first[i] = i;
  if (l->n < 2) return 0;
  span_t *sp = PyMem_Malloc(sizeof *sp * (size_t)l->n);
  if (!sp) return PyErr_NoMemory(), -1;
  for (int i = 0; i < l->n; i++) {
    byte_range(&l->t[i].m->dl_tensor, &sp[i].lo, &sp[i].hi);
    sp[i].i = i;
  }
  qsort(sp, (size_t)l->n, sizeof *sp, span_cmp);
  for (int a = 0; a < l->n;) {
    int b = a + 1;
    uintptr_t hi = sp[a].hi;
    int lowest = sp[a].i;
    while (b < l->n && sp[b].lo < hi && sp[b].lo < sp[b].hi && sp[a].lo < sp[a].hi) {
      if (sp[b].hi > hi) hi = sp[b].hi;
      if (sp[b].i < lowest) lowest = sp[b].i;
      b++;
    }
    for (int c = a; c < b; c++) first[sp[c].i] = lowest;
    a = b;
  }
  PyMem_Free(sp);
  return 0;
}

static int key_aliasing(kbuf *k, const tensor_list *l) {
  if (kb_byte(k, 'A') < 0) return -1;
  if (l->n < 2) return 0;
  int32_t *first = PyMem_Malloc(sizeof *first * (size_t)l->n);
  if (!first) return PyErr_NoMemory(), -1;
  int rc = alias_roots(l, first);
  for (int i = 0; i < l->n && rc == 0; i++)
    if (first[i] != i) rc = kb_put(k, (int32_t[2]){i, first[i]}, 8);
  PyMem_Free(first);
  return rc;
}

static int walk(PyObject *o, kbuf *k, tensor_list *tl, PyObject **ids, int depth);

/* Other objects (functions, arrays, ...): by identity. The entry keeps a reference to them, so their
 * address cannot be reused while it lives. */
static int walk_identity(PyObject *o, kbuf *k, PyObject **ids) {
  uintptr_t id = (uintptr_t)o;
  if (!*ids && !(*ids = PyList_New(0))) return -1;
  if (PyList_Append(*ids, o) < 0) return -1;
  return kb_byte(k, 'o') < 0 ? -1 : kb_put(k, &id, sizeof id);
}
/* A None, bool, float or str into the key (as walk() writes it). */
static int walk_scalar(kbuf *k, PyObject *o) { return walk(o, k, NULL, NULL, 0); }

/* Flattens one argument into the key and the tensor list. Objects keyed by identity are appended to
 * *ids (a list made on first use) so that a new entry can keep them alive. */
static int walk(PyObject *o, kbuf *k, tensor_list *tl, PyObject **ids, int depth) {
  if (depth > 64) return PyErr_SetString(PyExc_RecursionError, "thunder_c: arguments nested too deeply"), -1;
  if (PyObject_TypeCheck(o, (PyTypeObject *)pyth_T.tensor_type)) {
    if (tl_add(tl, o) < 0) return -1;
    return key_tensor(k, &tl->t[tl->n - 1]);
  }
  if (o == Py_None) return kb_byte(k, 'n');
  if (PyBool_Check(o)) return kb_byte(k, o == Py_True ? 'B' : 'b');
  if (PyLong_Check(o)) { /* int and its subclasses (IntEnum, numpy ints are not PyLong) by value */
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow) return PyErr_SetString(PyExc_OverflowError, "thunder_c: an int argument does not fit in int64"), -1;
    return kb_byte(k, 'i') < 0 ? -1 : kb_i64(k, v);
  }
  if (PyFloat_Check(o)) { /* float and subclasses (numpy.float64) by value */
    double f = PyFloat_AS_DOUBLE(o);
    return kb_byte(k, 'f') < 0 ? -1 : kb_put(k, &f, sizeof f);
  }
  if (PyUnicode_Check(o)) {
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(o, &n);
    if (!s || kb_byte(k, 's') < 0 || kb_i64(k, n) < 0) return -1;
    return kb_put(k, s, (size_t)n);
  }
  th_dtype dt;
  if (pyth_dtype_from(o, &dt)) return kb_byte(k, 'd') < 0 ? -1 : kb_byte(k, (char)dt);
  th_device dev;
  if (PyObject_TypeCheck(o, (PyTypeObject *)pyth_T.device_type) && pyth_device_from(o, &dev))
    return kb_byte(k, 'D') < 0 || kb_put(k, &dev, sizeof dev) < 0 ? -1 : 0;
  if (PyTuple_Check(o) || PyList_Check(o)) {
    /* a tuple copy: exporting a tensor runs Python code, which may change a list under us */
    PyObject *items = PySequence_Tuple(o);
    if (!items) return -1;
    Py_ssize_t n = PyTuple_GET_SIZE(items);
    int r = kb_byte(k, PyTuple_Check(o) ? '(' : '[') < 0 || kb_i64(k, n) < 0 ? -1 : 0;
    for (Py_ssize_t i = 0; r == 0 && i < n; i++) r = walk(PyTuple_GET_ITEM(items, i), k, tl, ids, depth + 1);
    Py_DECREF(items);
    return r;
  }
  if (PyDict_Check(o)) {
    PyObject *items = PyDict_Items(o); /* a snapshot, as above */
    if (!items) return -1;
    Py_ssize_t n = PyList_GET_SIZE(items);
    int r = kb_byte(k, '{') < 0 || kb_i64(k, n) < 0 ? -1 : 0;
    for (Py_ssize_t i = 0; r == 0 && i < n; i++) {
      PyObject *kv = PyList_GET_ITEM(items, i), *key = PyTuple_GET_ITEM(kv, 0);
      /* keys are never inputs (a tensor key is guarded by identity) */
      r = PyObject_TypeCheck(key, (PyTypeObject *)pyth_T.tensor_type) ? walk_identity(key, k, ids)
                                                                        : walk(key, k, tl, ids, depth + 1);
      if (r == 0) r = walk(PyTuple_GET_ITEM(kv, 1), k, tl, ids, depth + 1);
    }
    Py_DECREF(items);
    return r;
  }
  return walk_identity(o, k, ids);
}

/* ---- what the function reads besides its arguments ---------------------------------------------------
 * A trace bakes in what the function read at trace time: tensors it captured (closure cells, globals,
 * plain module attributes) by identity, and numbers and strings by value. The key guards them, so
 * rebinding a closure variable, a global or a module attribute to another tensor or number retraces.
 * Other objects (functions, modules) are not guarded. */
static int key_capture(kbuf *k, PyObject *o) {
  if (PyObject_TypeCheck(o, (PyTypeObject *)pyth_T.tensor_type)) {
    uintptr_t id = (uintptr_t)o;
    return kb_byte(k, 'c') < 0 ? -1 : kb_put(k, &id, sizeof id);
  }
  if (o == Py_None || PyBool_Check(o) || PyLong_CheckExact(o) || PyFloat_CheckExact(o) || PyUnicode_Check(o)) {
    if (PyLong_CheckExact(o)) { /* big ints: by their hash (no overflow error for a guard) */
      Py_hash_t h = PyObject_Hash(o);
      return kb_byte(k, 'h') < 0 ? -1 : kb_put(k, &h, sizeof h);
    }
    return walk_scalar(k, o);
  }
  return kb_byte(k, '-');
}

static int key_function_reads(kbuf *k, PyObject *fn) {
  if (!fn || !PyFunction_Check(fn)) return 0;
  PyObject *closure = PyFunction_GET_CLOSURE(fn);
  if (kb_byte(k, 'F') < 0) return -1;
  for (Py_ssize_t i = 0; closure && i < PyTuple_GET_SIZE(closure); i++) {
    PyObject *v = PyCell_GET(PyTuple_GET_ITEM(closure, i));
    if (v && key_capture(k, v) < 0) return -1;
  }
  PyObject *defaults = PyFunction_GET_DEFAULTS(fn); /* f(x, scale=2.0): changing f.__defaults__ retraces */
  for (Py_ssize_t i = 0; defaults && i < PyTuple_GET_SIZE(defaults); i++)
    if (key_capture(k, PyTuple_GET_ITEM(defaults, i)) < 0) return -1;
  PyObject *kwdefaults = PyFunction_GET_KW_DEFAULTS(fn);
  if (kwdefaults && PyDict_Check(kwdefaults)) {
    Py_ssize_t pos = 0;
    PyObject *key, *v;
    while (PyDict_Next(kwdefaults, &pos, &key, &v))
      if (key_capture(k, v) < 0) return -1;
  }
  PyObject *globals = PyFunction_GET_GLOBALS(fn);
  PyObject *names = ((PyCodeObject *)PyFunction_GET_CODE(fn))->co_names;
  for (Py_ssize_t i = 0; globals && names && i < PyTuple_GET_SIZE(names); i++) {
    PyObject *v = PyDict_GetItemWithError(globals, PyTuple_GET_ITEM(names, i));
    if (v) {
      if (key_capture(k, v) < 0) return -1;
    } else if (PyErr_Occurred()) {
      return -1;
    }
  }
  return 0;
}

/* ---- cache entries ------------------------------------------------------------------------------- */

typedef struct {
  PyObject_HEAD
  th_trace *traces[6]; /* owned: the initial trace, then each transform's result */
  int ntraces;
  th_program *prog;
  PyObject *lifted;    /* list of captured torch tensors (inputs after the arguments and parameters) */
  PyObject *pinned;    /* objects whose identity is in the key (kept alive so ids are not reused) */
  int nargs_tensors;   /* tensors among the arguments */
  int *param_input;    /* per parameter slot: its input index (shared parameters share one) */
  int nparams_in;      /* distinct parameter inputs */
  pyth_grad *grad;     /* owned: the backward of a call under autograd (autograd.c), or NULL */
  int64_t rng_draws;   /* the words torch's generator advances by per call (rng.c); 0: no dropout */
} pyth_entry;

static void entry_dealloc(PyObject *o) {
  pyth_entry *e = (pyth_entry *)o;
  PyObject_GC_UnTrack(o);
  th_program_free(e->prog);
  pyth_grad_free(e->grad);
  for (int i = 0; i < e->ntraces; i++) th_trace_free(e->traces[i]);
  Py_XDECREF(e->lifted);
  Py_XDECREF(e->pinned);
  PyMem_Free(e->param_input);
  PyObject_GC_Del(o);
}

/* Entries hold Python objects (captured tensors, identity-keyed arguments) that may refer back to
 * the jitted function (a module whose forward calls it): the cycle collector must see them. */
static int entry_traverse(PyObject *o, visitproc visit, void *arg) {
  pyth_entry *e = (pyth_entry *)o;
  Py_VISIT(e->lifted);
  Py_VISIT(e->pinned);
  return 0;
}

static int entry_clear(PyObject *o) {
  pyth_entry *e = (pyth_entry *)o;
  Py_CLEAR(e->pinned);
  return 0;
}

static PyTypeObject entry_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "thunder_c._CacheEntry",
    .tp_basicsize = sizeof(pyth_entry),
    .tp_dealloc = entry_dealloc,
    .tp_traverse = entry_traverse,
    .tp_clear = entry_clear,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
};

/* ---- the jitted callable ------------------------------------------------------------------------- */

typedef enum { CACHE_CONSTANT_VALUES, CACHE_SAME_INPUT, CACHE_NONE } cache_mode;

typedef struct {
  PyObject_HEAD
  PyObject *fn;        /* the function, module, or Trace */
  bool is_module;
  const th_trace *given_trace; /* jit(trace): run this trace as it is */
  PyObject *slots;     /* modules: list of (owner dict, key, qualified name) per parameter/buffer */
  PyObject *submodules; /* modules: list of submodules (their `training` flags are in the key) */
  PyObject *arg_names; /* list of parameter names of fn (for input names), may be empty */
  PyObject *code_fn;   /* the Python function whose closure and globals are guarded, or NULL */
  PyObject *attr_slots; /* modules: list of (submodule __dict__, name) of plain tensor/number attributes */
  PyObject *structure;  /* modules: structure_of() when the slots were collected */
  PyObject *cache;     /* dict: key bytes -> entry */
  PyObject *last;      /* the entry of the last call */
  cache_mode mode;
  const char **executors;
  int nexecutors;
  PyObject *executor_names; /* list of str (owns the strings executors point into), then the executor
                             * objects given (thunder_c.extend executors: kept alive with the function) */
  long long hits, misses;
  PyObject *weakrefs;
  pyth_float8 float8;  /* jit(..., float8=...): the float8 transform on every trace (transforms.c) */
  PyObject *dump_dir;  /* jit(..., dump_fusions=dir): str, each program's fusion source written there */
} pyth_jit;

static void jit_dealloc(PyObject *o) {
  pyth_jit *j = (pyth_jit *)o;
  PyObject_GC_UnTrack(o);
  if (j->weakrefs) PyObject_ClearWeakRefs(o);
  Py_XDECREF(j->fn);
  Py_XDECREF(j->slots);
  Py_XDECREF(j->submodules);
  Py_XDECREF(j->arg_names);
  Py_XDECREF(j->code_fn);
  Py_XDECREF(j->attr_slots);
  Py_XDECREF(j->structure);
  Py_XDECREF(j->cache);
  Py_XDECREF(j->last);
  Py_XDECREF(j->executor_names);
  PyMem_Free(j->executors);
  pyth_float8_clear(&j->float8);
  Py_XDECREF(j->dump_dir);
  PyObject_GC_Del(o);
}

static int jit_traverse(PyObject *o, visitproc visit, void *arg) {
  pyth_jit *j = (pyth_jit *)o;
  Py_VISIT(j->fn);
  Py_VISIT(j->slots);
  Py_VISIT(j->submodules);
  Py_VISIT(j->code_fn);
  Py_VISIT(j->attr_slots);
  Py_VISIT(j->structure);
  Py_VISIT(j->cache);
  Py_VISIT(j->last);
  Py_VISIT(j->float8.filter);
  return 0;
}

static int jit_clear(PyObject *o) {
  pyth_jit *j = (pyth_jit *)o;
  Py_CLEAR(j->fn);
  Py_CLEAR(j->slots);
  Py_CLEAR(j->submodules);
  Py_CLEAR(j->code_fn);
  Py_CLEAR(j->attr_slots);
  Py_CLEAR(j->structure);
  Py_CLEAR(j->cache);
  Py_CLEAR(j->last);
  return 0;
}

/* Parameter names of a Python function (for naming trace inputs): co_varnames up to the positional
 * and keyword-only count; `skip_self` drops the first (bound methods, Module.forward). */
static PyObject *param_names(PyObject *fn, bool skip_self) {
  PyObject *f = Py_NewRef(fn);
  if (PyMethod_Check(f)) {
    PyObject *g = Py_NewRef(PyMethod_GET_FUNCTION(f));
    Py_DECREF(f);
    f = g;
    skip_self = true;
  }
  PyObject *names = PyList_New(0);
  if (!names) return Py_DECREF(f), NULL;
  if (PyFunction_Check(f)) {
    PyCodeObject *co = (PyCodeObject *)PyFunction_GET_CODE(f);
    PyObject *vn = PyObject_GetAttrString((PyObject *)co, "co_varnames");
    int n = co->co_argcount + co->co_kwonlyargcount;
    for (int i = skip_self ? 1 : 0; vn && i < n && i < PyTuple_GET_SIZE(vn); i++)
      PyList_Append(names, PyTuple_GET_ITEM(vn, i));
    Py_XDECREF(vn);
  }
  PyErr_Clear();
  Py_DECREF(f);
  return names;
}

/* A module's structure as the slots were collected from it: per submodule, its children (identity),
 * the number of its parameters, buffers and hooks. A change (a submodule replaced, a parameter
 * registered, a hook added) makes the jitted module collect its slots again and drop its cache. */
static PyObject *structure_of(pyth_jit *j) {
  PyObject *sig = PyList_New(0);
  static const char *const dicts[] = {"_modules", "_parameters", "_buffers", "_forward_hooks", "_forward_pre_hooks"};
  for (Py_ssize_t s = 0; sig && s < PyList_GET_SIZE(j->submodules); s++) {
    PyObject *mod = PyList_GET_ITEM(j->submodules, s);
    PyObject *md = PyObject_GenericGetDict(mod, NULL);
    for (size_t d = 0; sig && md && d < sizeof dicts / sizeof *dicts; d++) {
      PyObject *x = PyDict_GetItemString(md, dicts[d]);
      PyObject *item = !x || !PyDict_Check(x) ? Py_NewRef(Py_None)
                       : d == 0 ? PyDict_Values(x)
                                : PyLong_FromSsize_t(PyDict_Size(x));
      if (!item || PyList_Append(sig, item) < 0) Py_CLEAR(sig);
      Py_XDECREF(item);
    }
    PyObject *n = md ? PyLong_FromSsize_t(PyDict_Size(md)) : NULL; /* an attribute added or deleted */
    if (!n || PyList_Append(sig, n) < 0) Py_CLEAR(sig);
    Py_XDECREF(n);
    Py_XDECREF(md);
  }
  return sig;
}

static int structure_changed(pyth_jit *j) {
  PyObject *now = structure_of(j);
  if (!now) return -1;
  int same = j->structure ? PyObject_RichCompareBool(now, j->structure, Py_EQ) : 0;
  Py_DECREF(now);
  return same < 0 ? -1 : !same;
}

/* Collects a module's parameter and buffer slots (owner dict, name, qualified name) and submodules. */
static int collect_slots(pyth_jit *j) {
  Py_CLEAR(j->slots);
  Py_CLEAR(j->submodules);
  Py_CLEAR(j->attr_slots);
  Py_CLEAR(j->structure);
  j->slots = PyList_New(0);
  j->submodules = PyList_New(0);
  j->attr_slots = PyList_New(0);
  if (!j->slots || !j->submodules || !j->attr_slots) return -1;
  PyObject *it = PyObject_CallMethod(j->fn, "named_modules", NULL);
  if (!it) return -1;
  PyObject *iter = PyObject_GetIter(it);
  Py_DECREF(it);
  if (!iter) return -1;
  PyObject *pair;
  int rc = 0;
  while (rc == 0 && (pair = PyIter_Next(iter))) {
    PyObject *prefix = PyTuple_GetItem(pair, 0), *mod = PyTuple_GetItem(pair, 1);
    if (!prefix || !mod || PyList_Append(j->submodules, mod) < 0) rc = -1;
    PyObject *dicts[2] = {rc ? NULL : PyObject_GetAttr(mod, s_parameters), rc ? NULL : PyObject_GetAttr(mod, s_buffers)};
    for (int d = 0; d < 2 && rc == 0; d++) {
      if (!dicts[d] || !PyDict_Check(dicts[d])) {
        PyErr_Clear();
        continue;
      }
      Py_ssize_t pos = 0;
      PyObject *k, *v;
      while (PyDict_Next(dicts[d], &pos, &k, &v)) {
        PyObject *q = PyUnicode_GetLength(prefix) ? PyUnicode_FromFormat("%U.%U", prefix, k) : Py_NewRef(k);
        PyObject *slot = q ? PyTuple_Pack(3, dicts[d], k, q) : NULL;
        Py_XDECREF(q);
        if (!slot || PyList_Append(j->slots, slot) < 0) rc = -1;
        Py_XDECREF(slot);
        if (rc) break;
      }
    }
    Py_XDECREF(dicts[0]);
    Py_XDECREF(dicts[1]);
    /* plain attributes a forward may read: tensors (captured) and numbers/strings (baked in) */
    PyObject *md = rc ? NULL : PyObject_GenericGetDict(mod, NULL);
    if (md && PyDict_Check(md)) {
      Py_ssize_t pos = 0;
      PyObject *k, *v;
      while (rc == 0 && PyDict_Next(md, &pos, &k, &v)) {
        const char *ks = PyUnicode_Check(k) ? PyUnicode_AsUTF8(k) : NULL;
        if (!ks || ks[0] == '_' || !strcmp(ks, "training")) continue;
        bool keep = PyObject_TypeCheck(v, (PyTypeObject *)pyth_T.tensor_type) || PyBool_Check(v) ||
                    PyLong_CheckExact(v) || PyFloat_CheckExact(v) || PyUnicode_Check(v);
        if (!keep) continue;
        PyObject *slot = PyTuple_Pack(2, md, k);
        if (!slot || PyList_Append(j->attr_slots, slot) < 0) rc = -1;
        Py_XDECREF(slot);
      }
    }
    Py_XDECREF(md);
    PyErr_Clear();
    Py_DECREF(pair);
  }
  Py_DECREF(iter);
  if (rc || PyErr_Occurred()) return -1;
  j->structure = structure_of(j);
  return j->structure ? 0 : -1;
}

/* The key's header: autocast and grad state of the caller, and torch's default dtype. */
static int key_state(kbuf *k) {
  PyObject *dd = PyObject_CallNoArgs(pyth_T.get_default_dtype);
  th_dtype ddt = TH_F32;
  if (!dd) return -1;
  bool known = pyth_dtype_from(dd, &ddt);
  Py_DECREF(dd);
  if (kb_byte(k, known ? (char)ddt : 99) < 0) return -1;
  PyObject *v[5] = {PyObject_CallNoArgs(pyth_T.is_autocast_cpu_enabled), PyObject_CallNoArgs(pyth_T.get_autocast_cpu_dtype),
                    PyObject_CallNoArgs(pyth_T.is_autocast_enabled), PyObject_CallNoArgs(pyth_T.get_autocast_gpu_dtype),
                    PyObject_CallNoArgs(pyth_T.is_grad_enabled)};
  int rc = 0;
  for (int i = 0; i < 5; i++) {
    if (!v[i]) {
      rc = -1;
      continue;
    }
    th_dtype dt = TH_DTYPE_COUNT;
    char c = v[i] == Py_True ? 1 : v[i] == Py_False ? 0 : pyth_dtype_from(v[i], &dt) ? (char)(10 + dt) : 99;
    if (kb_byte(k, c) < 0) rc = -1;
  }
  for (int i = 0; i < 5; i++) Py_XDECREF(v[i]);
  return rc;
}

/* ---- tracing (a cache miss) ------------------------------------------------------------------------ */

typedef struct {
  pyth_tracer tr;
  int next_input;
  PyObject *inputs; /* list: the proxy of each trace input, in order */
} trace_ctx;

/* Rebuilds argument `o` with proxies in place of tensors, adding one trace input per tensor in the
 * order walk() met them. `name` is the input name for a tensor here (NULL: a fresh t<N>). */
static PyObject *proxify(trace_ctx *c, PyObject *o, const char *name, int depth) {
  if (PyObject_TypeCheck(o, (PyTypeObject *)pyth_T.tensor_type)) {
    PyObject *dt = PyObject_GetAttrString(o, "dtype"), *shape = PyObject_GetAttrString(o, "shape");
    PyObject *dev = PyObject_GetAttrString(o, "device");
    PyObject *r = NULL;
    th_dtype dtype;
    th_device device;
    int64_t sh[TH_MAX_DIMS];
    Py_ssize_t nd = shape ? PyTuple_Size(shape) : -1;
    if (!dt || !dev || nd < 0) goto done;
    if (!pyth_dtype_from(dt, &dtype)) {
      PyErr_Format(PyExc_NotImplementedError, "thunder_c: input %s has dtype %R, which thunder_c does not support", name ? name : "", dt);
      goto done;
    }
    if (!pyth_device_from(dev, &device)) {
      PyErr_Format(PyExc_NotImplementedError, "thunder_c: input %s is on device %R, which thunder_c does not support", name ? name : "", dev);
      goto done;
    }
    if (nd > TH_MAX_DIMS) {
      PyErr_Format(PyExc_NotImplementedError, "thunder_c: input %s has rank %zd; thunder_c supports rank <= %d", name ? name : "", nd, TH_MAX_DIMS);
      goto done;
    }
    for (Py_ssize_t i = 0; i < nd; i++) sh[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i));
    if (PyErr_Occurred()) goto done;
    /* named after the parameter when that name is a free Python identifier, else t<N> */
    th_value *v = name ? th_trace_add_tensor_input(c->tr.trace, name, dtype, device, (int)nd, sh) : NULL;
    if (!v) v = th_trace_add_tensor_input(c->tr.trace, NULL, dtype, device, (int)nd, sh);
    if (!v) {
      pyth_raise(th_last_status());
      goto done;
    }
    c->next_input++;
    r = pyth_proxy_new(&c->tr, v);
    if (r && PyList_Append(c->inputs, r) < 0) Py_CLEAR(r);
    PyObject *rg = r ? PyObject_GetAttr(o, s_requires_grad) : NULL;
    if (r && (!rg || (rg == Py_True && PySet_Add(c->tr.grad_leaves, r) < 0))) Py_CLEAR(r);
    Py_XDECREF(rg);
  done:
    Py_XDECREF(dt);
    Py_XDECREF(shape);
    Py_XDECREF(dev);
    return r;
  }
  if (depth > 64) return PyErr_SetString(PyExc_RecursionError, "thunder_c: arguments nested too deeply"), NULL;
  if (PyTuple_Check(o) || PyList_Check(o)) {
    Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
    PyObject *r = PyList_New(n);
    if (!r) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
      char sub[128];
      if (name) snprintf(sub, sizeof sub, "%s_%zd", name, i);
      PyObject *x = proxify(c, PySequence_Fast_GET_ITEM(o, i), name ? sub : NULL, depth + 1);
      if (!x) return Py_DECREF(r), NULL;
      PyList_SET_ITEM(r, i, x);
    }
    if (PyList_Check(o)) return r;
    PyObject *t = PyList_AsTuple(r);
    Py_DECREF(r);
    if (t && !PyTuple_CheckExact(o)) { /* namedtuples and torch.Size keep their type */
      PyObject *nt = PyObject_CallObject((PyObject *)Py_TYPE(o), t);
      if (!nt) {
        PyErr_Clear();
        nt = PyObject_Call((PyObject *)Py_TYPE(o), t, NULL);
      }
      if (!nt) {
        PyErr_Clear();
        nt = PyObject_CallOneArg((PyObject *)Py_TYPE(o), t);
      }
      Py_DECREF(t);
      return nt;
    }
    return t;
  }
  if (PyDict_Check(o)) {
    PyObject *r = PyDict_New();
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (r && PyDict_Next(o, &pos, &k, &v)) {
      char sub[128];
      const char *ks = PyUnicode_Check(k) ? PyUnicode_AsUTF8(k) : NULL;
      if (name && ks) snprintf(sub, sizeof sub, "%s_%s", name, ks);
      PyObject *x = proxify(c, v, name && ks ? sub : NULL, depth + 1);
      if (!x || PyDict_SetItem(r, k, x) < 0) Py_CLEAR(r);
      Py_XDECREF(x);
    }
    return r;
  }
  return Py_NewRef(o);
}

static void free_traces(th_trace **t, int n) {
  for (int i = 0; i < n; i++) th_trace_free(t[i]);
}

/* The trace input of call tensor i (arguments first, then module parameter slots), or -1. */
static int tensor_input_index(const pyth_jit *j, const pyth_entry *e, int i) {
  if (i < e->nargs_tensors) return i;
  int s = i - e->nargs_tensors;
  if (!j->is_module || s >= PyList_GET_SIZE(j->slots)) return -1;
  return e->param_input[s];
}

/* Puts back the submodule attributes of `snapshots` (list of (__dict__, copy)) that tracing rebound.
 * With `check`, an attribute that now holds a proxy is an error: forward stored a computed tensor in
 * the module (a side effect on module state that a compiled program cannot replay). */
static int restore_module_attributes(PyObject *snapshots, bool check) {
  int rc = 0;
  for (Py_ssize_t s = 0; s < PyList_GET_SIZE(snapshots); s++) {
    PyObject *md = PyTuple_GET_ITEM(PyList_GET_ITEM(snapshots, s), 0);
    PyObject *old = PyTuple_GET_ITEM(PyList_GET_ITEM(snapshots, s), 1);
    PyObject *keys = PyDict_Keys(md);
    for (Py_ssize_t i = 0; keys && i < PyList_GET_SIZE(keys); i++) {
      PyObject *k = PyList_GET_ITEM(keys, i);
      PyObject *now = PyDict_GetItem(md, k), *was = PyDict_GetItem(old, k);
      if (now == was) continue;
      if (check && rc == 0 && now && Py_TYPE(now) == &pyth_proxy_type) {
        PyErr_Format(PyExc_NotImplementedError,
                     "thunder_c: forward assigned a computed tensor to the module attribute '%U' (a side effect on "
                     "module state, which thunder_c does not replay); return the tensor instead, or update a "
                     "registered buffer in place (self.buf.copy_(...))", k);
        rc = -1;
      }
      if (!check || rc) { /* undo */
        if (was) PyDict_SetItem(md, k, was);
        else PyDict_DelItem(md, k);
      }
    }
    Py_XDECREF(keys);
  }
  PyErr_Occurred() && rc == 0 ? PyErr_Clear() : (void)0;
  return rc;
}

/* Which trace inputs require grad (rg, nin entries): arguments and module parameters by the call's
 * requires_grad (part of the key), captured tensors by theirs now. 1 when grad is enabled and one
 * does, 0 when the call runs forward only, -1 with an exception. */
static int grad_inputs(const pyth_jit *j, const pyth_entry *e, const tensor_list *tl, int nin, bool *rg) {
  PyObject *ge = PyObject_CallNoArgs(pyth_T.is_grad_enabled);
  if (!ge) return -1;
  bool enabled = ge == Py_True;
  Py_DECREF(ge);
  if (!enabled) return 0;
  int any = 0;
  for (int i = 0; i < tl->n; i++) {
    int ix = tensor_input_index(j, e, i);
    if (ix >= 0 && ix < nin && tl->t[i].requires_grad) any = rg[ix] = true;
  }
  Py_ssize_t nl = PyList_GET_SIZE(e->lifted);
  for (Py_ssize_t i = 0; i < nl; i++) {
    int ix = nin - (int)nl + (int)i;
    PyObject *r = PyObject_GetAttr(PyList_GET_ITEM(e->lifted, i), s_requires_grad);
    if (!r) return -1;
    if (r == Py_True && ix >= 0) any = rg[ix] = true;
    Py_DECREF(r);
  }
  return any;
}

/* Traces the function on proxies of (args, kwargs) and compiles it into a new entry. */
static pyth_entry *compile_entry(pyth_jit *j, PyObject *args, PyObject *kwargs, const tensor_list *tl) {
  pyth_entry *e = PyObject_GC_New(pyth_entry, &entry_type);
  if (!e) return NULL;
  e->ntraces = 0;
  e->prog = NULL;
  e->grad = NULL;
  e->rng_draws = 0;
  e->lifted = PyList_New(0);
  e->pinned = PyList_New(0);
  e->param_input = NULL;
  e->nparams_in = 0;
  e->nargs_tensors = 0;
  PyObject_GC_Track((PyObject *)e);
  if (!e->lifted || !e->pinned) goto fail;
  th_trace *initial = NULL;
  if (j->given_trace) {
    /* jit(trace): the given trace is the program; its owner outlives the entry through j->fn. */
    th_compile_options o = {0};
    o.executors = j->executors;
    o.nexecutors = j->nexecutors;
    o.dump_dir = j->dump_dir ? PyUnicode_AsUTF8(j->dump_dir) : NULL;
    const th_trace *given = j->given_trace;
    if (j->float8.enabled) { /* jit(trace, float8=...): the transform's trace is the program */
      th_trace *f8 = NULL;
      if (pyth_float8_apply(&j->float8, given, &f8) < 0) goto fail;
      e->traces[e->ntraces++] = f8;
      given = f8;
    }
    th_status st = th_program_compile(given, &o, &e->prog);
    if (st != TH_OK) {
      pyth_raise(st);
      goto fail;
    }
    e->rng_draws = th_program_num_random_ops(e->prog) > 0 ? pyth_rng_eager_draws(given) : 0;
    e->nargs_tensors = tl->n;
    return e;
  }

  /* factory functions (torch.ones(3)) take torch's default dtype, which the core's ops do not read */
  {
    PyObject *dd = PyObject_CallNoArgs(pyth_T.get_default_dtype);
    if (!dd) goto fail;
    bool f32 = dd == pyth_T.dtypes[TH_F32];
    if (!f32)
      PyErr_Format(PyExc_NotImplementedError,
                   "thunder_c: torch.set_default_dtype(%R) is not supported (thunder-c's factory functions "
                   "default to float32); pass dtype= explicitly and restore the default", dd);
    Py_DECREF(dd);
    if (!f32) goto fail;
  }
  trace_ctx c = {{0}, 0, NULL};
  c.tr.trace = initial = th_trace_new("computation");
  c.tr.epoch = ++epoch_counter;
  c.tr.lifted = e->lifted;
  c.tr.lifted_ids = PyDict_New();
  c.tr.groups = PyDict_New();
  c.inputs = PyList_New(0);
  c.tr.grad_leaves = PySet_New(NULL);
  PyObject *pkg = PyImport_ImportModule("thunder_c");
  PyObject *pkg_file = pkg ? PyObject_GetAttrString(pkg, "__file__") : NULL;
  Py_XDECREF(pkg);
  PyObject *torch_file = PyObject_GetAttrString(pyth_T.torch, "__file__");
  PyErr_Clear();
  /* the directories: everything up to the last '/' of the package's __init__.py */
  if (pkg_file && PyUnicode_Check(pkg_file)) {
    Py_ssize_t n = PyUnicode_GetLength(pkg_file);
    Py_ssize_t slash = PyUnicode_FindChar(pkg_file, '/', 0, n, -1);
    c.tr.pkg_dir = slash > 0 ? PyUnicode_Substring(pkg_file, 0, slash + 1) : NULL;
  }
  if (torch_file && PyUnicode_Check(torch_file)) {
    Py_ssize_t n = PyUnicode_GetLength(torch_file);
    Py_ssize_t slash = PyUnicode_FindChar(torch_file, '/', 0, n, -1);
    c.tr.torch_dir = slash > 0 ? PyUnicode_Substring(torch_file, 0, slash + 1) : NULL;
  }
  Py_XDECREF(pkg_file);
  Py_XDECREF(torch_file);
  PyErr_Clear();

  PyObject *pargs = NULL, *pkwargs = NULL, *result = NULL, *mode = NULL, *saved = NULL, *snapshots = NULL;
  pyth_tracer *prev = pyth_active;
  bool entered = false;
  if (!initial) {
    pyth_raise(th_last_status());
    goto trace_fail;
  }
  if (!c.tr.lifted_ids || !c.tr.groups || !c.inputs || !c.tr.grad_leaves) goto trace_fail;

  /* arguments -> proxies, named after the function's parameters */
  Py_ssize_t na = PyTuple_GET_SIZE(args), nnames = PyList_GET_SIZE(j->arg_names);
  pargs = PyTuple_New(na);
  if (!pargs) goto trace_fail;
  for (Py_ssize_t i = 0; i < na; i++) {
    char nm[128];
    const char *pn = i < nnames ? PyUnicode_AsUTF8(PyList_GET_ITEM(j->arg_names, i)) : NULL;
    if (pn) snprintf(nm, sizeof nm, "%s", pn);
    else snprintf(nm, sizeof nm, "args_%zd", i);
    PyObject *x = proxify(&c, PyTuple_GET_ITEM(args, i), nm, 0);
    if (!x) goto trace_fail;
    PyTuple_SET_ITEM(pargs, i, x);
  }
  if (kwargs) {
    pkwargs = PyDict_New();
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (pkwargs && PyDict_Next(kwargs, &pos, &k, &v)) {
      PyObject *x = proxify(&c, v, PyUnicode_AsUTF8(k), 0);
      if (!x || PyDict_SetItem(pkwargs, k, x) < 0) {
        Py_XDECREF(x);
        goto trace_fail;
      }
      Py_DECREF(x);
    }
    if (!pkwargs) goto trace_fail;
  }
  e->nargs_tensors = c.next_input;

  /* module parameters and buffers -> proxies, swapped into the module while it is traced */
  if (j->is_module) {
    Py_ssize_t ns = PyList_GET_SIZE(j->slots);
    e->param_input = PyMem_Calloc((size_t)(ns ? ns : 1), sizeof(int));
    saved = PyList_New(ns);
    if (!e->param_input || !saved) goto trace_fail;
    for (Py_ssize_t s = 0; s < ns; s++) {
      PyObject *slot = PyList_GET_ITEM(j->slots, s);
      PyObject *d = PyTuple_GET_ITEM(slot, 0), *k = PyTuple_GET_ITEM(slot, 1), *q = PyTuple_GET_ITEM(slot, 2);
      PyObject *t = PyDict_GetItemWithError(d, k);
      if (!t) {
        if (!PyErr_Occurred()) PyErr_Format(PyExc_RuntimeError, "thunder_c: the module's parameter %U disappeared", q);
        goto trace_fail;
      }
      PyList_SET_ITEM(saved, s, Py_NewRef(t));
      /* a parameter shared by two submodules is one input */
      int same = -1;
      for (Py_ssize_t r = 0; r < s && same < 0; r++)
        if (PyList_GET_ITEM(saved, r) == t) same = (int)r;
      PyObject *px;
      if (same >= 0) {
        e->param_input[s] = e->param_input[same];
        PyObject *sd = PyTuple_GET_ITEM(PyList_GET_ITEM(j->slots, same), 0);
        px = Py_XNewRef(PyDict_GetItem(sd, PyTuple_GET_ITEM(PyList_GET_ITEM(j->slots, same), 1)));
      } else if (t == Py_None) {
        e->param_input[s] = -1;
        px = Py_NewRef(Py_None);
      } else {
        char nm[160];
        const char *qs = PyUnicode_AsUTF8(q);
        snprintf(nm, sizeof nm, "t_%s", qs ? qs : "param");
        for (char *p = nm; *p; p++)
          if (*p == '.') *p = '_';
        e->param_input[s] = c.next_input;
        px = proxify(&c, t, nm, 0);
        e->nparams_in++;
      }
      if (!px || PyDict_SetItem(d, k, px) < 0) {
        Py_XDECREF(px);
        goto trace_fail;
      }
      Py_DECREF(px);
    }
  }

  /* inputs whose memory overlaps (f(a, a), a parameter shared as a view) start in one alias group */
  {
    int32_t *first = PyMem_Malloc(sizeof *first * (size_t)(tl->n ? tl->n : 1));
    int rc = first ? alias_roots(tl, first) : (PyErr_NoMemory(), -1);
    for (int i = 0; rc == 0 && i < tl->n; i++) {
      if (first[i] == i) continue;
      int ii = tensor_input_index(j, e, i), kk = tensor_input_index(j, e, first[i]);
      if (ii < 0 || kk < 0 || ii == kk || ii >= PyList_GET_SIZE(c.inputs) || kk >= PyList_GET_SIZE(c.inputs)) continue;
      rc = pyth_alias_join(&c.tr, PyList_GET_ITEM(c.inputs, ii), PyList_GET_ITEM(c.inputs, kk));
    }
    PyMem_Free(first);
    if (rc < 0) goto trace_fail;
  }

  /* module state: a snapshot of every submodule's attributes, to undo assignments made while tracing */
  if (j->is_module) {
    snapshots = PyList_New(0);
    for (Py_ssize_t s = 0; snapshots && s < PyList_GET_SIZE(j->submodules); s++) {
      PyObject *md = PyObject_GenericGetDict(PyList_GET_ITEM(j->submodules, s), NULL);
      PyObject *copy = md ? PyDict_Copy(md) : NULL;
      PyObject *pair = copy ? PyTuple_Pack(2, md, copy) : NULL;
      if (!pair || PyList_Append(snapshots, pair) < 0) Py_CLEAR(snapshots);
      Py_XDECREF(md);
      Py_XDECREF(copy);
      Py_XDECREF(pair);
    }
    if (!snapshots) goto trace_fail;
  }

  /* trace: the mode routes torch calls to the tracer while fn runs on proxies */
  pyth_active = &c.tr;
  if (mode_class) {
    mode = PyObject_CallNoArgs(mode_class);
    PyObject *r = mode ? PyObject_CallMethodNoArgs(mode, s_enter) : NULL;
    if (!r) goto trace_fail;
    Py_DECREF(r);
    entered = true;
  }
  /* torch's default generator, which the trace must leave as it found it (rng.c) */
  PyObject *rng_before = pyth_rng_snapshot();
  { /* trace-time stand-ins for submodules thunder_c records itself (torchao's Float8Linear) */
    const bool hooked = j->is_module && module_hook;
    PyObject *undo = hooked ? PyObject_CallOneArg(module_hook, j->submodules) : NULL;
    if (rng_before && (!hooked || undo)) result = PyObject_Call(j->fn, pargs, pkwargs);
    if (undo && undo != Py_None) {
      PyObject *et, *ev, *tb;
      PyErr_Fetch(&et, &ev, &tb);
      PyObject *r = PyObject_CallNoArgs(undo);
      Py_XDECREF(r);
      if (et) PyErr_Restore(et, ev, tb);
      else if (!r) Py_CLEAR(result);
    }
    Py_XDECREF(undo);
  }
  if (entered) {
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    PyObject *r = PyObject_CallMethod(mode, "__exit__", "OOO", Py_None, Py_None, Py_None);
    Py_XDECREF(r);
    if (et) PyErr_Restore(et, ev, tb);
    else if (!r) Py_CLEAR(result);
    entered = false;
  }
  if (result && pyth_rng_unchanged(rng_before) < 0) Py_CLEAR(result);
  Py_XDECREF(rng_before);
  if (!result) goto trace_fail;
  if (snapshots && restore_module_attributes(snapshots, true) < 0) goto trace_fail;

  /* the return value */
  {
    pyth_pool pool = {0};
    th_arg ret;
    int rc = pyth_to_arg(&c.tr, result, &ret, &pool, "the jitted function's return value");
    /* the final versions of inputs updated in place travel with the return (data dependence) */
    int nin = th_trace_num_inputs(initial), nup = 0;
    th_value **upd = rc == 0 ? pyth_pool_alloc(&pool, sizeof(th_value *) * (size_t)(nin + 1)) : NULL;
    if (rc == 0 && !upd) rc = -1;
    PyObject *candidates = rc == 0 ? PyList_New(0) : NULL;
    if (candidates) {
      PyObject *lifted = PyDict_Values(c.tr.lifted_ids);
      if (!lifted || PyList_SetSlice(candidates, 0, 0, c.inputs) < 0 ||
          PyList_SetSlice(candidates, PyList_GET_SIZE(candidates), PyList_GET_SIZE(candidates), lifted) < 0)
        rc = -1;
      Py_XDECREF(lifted);
      for (Py_ssize_t i = 0; rc == 0 && i < PyList_GET_SIZE(candidates); i++) {
        th_value *now = ((pyth_proxy *)PyList_GET_ITEM(candidates, i))->value;
        bool is_input = false;
        for (int k = 0; k < nin && !is_input; k++) is_input = th_trace_input(initial, k) == now;
        bool seen = false;
        for (int k = 0; k < nup && !seen; k++) seen = upd[k] == now;
        if (!is_input && !seen && nup < nin) upd[nup++] = now;
      }
      Py_DECREF(candidates);
    } else {
      rc = -1;
    }
    th_status st = rc == 0 ? th_trace_set_return_updated(initial, ret, nup, upd) : TH_OK;
    pyth_pool_free(&pool);
    if (rc < 0) goto trace_fail;
    if (st != TH_OK) {
      pyth_raise(st);
      goto trace_fail;
    }
  }
  pyth_active = prev;
  pyth_autocast_clear(&c.tr);

  /* the pipeline: [float8,] DCE, CSE, then the execution passes (which end with Delete Last Used) */
  th_status st = th_trace_verify(initial);
  th_trace *dce = NULL, *cse = NULL, *f8 = NULL;
  if (st == TH_OK && (j->float8.enabled || c.tr.float8_marks)) {
    /* the filter sees module parameters by their qualified names ("fc1.weight"; a ThunderModule's
     * own "_model." prefix left out, as its state_dict does) */
    Py_CLEAR(j->float8.param_names);
    if (j->is_module && e->param_input && (j->float8.param_names = PyDict_New())) {
      const bool wrapper = PyObject_HasAttrString(j->fn, "_thunder_jit");
      for (Py_ssize_t s = 0; s < PyList_GET_SIZE(j->slots); s++) {
        int ix = e->param_input[s];
        const char *nm = ix >= 0 && ix < th_trace_num_inputs(initial) ? th_value_name(th_trace_input(initial, ix)) : NULL;
        PyObject *q = PyTuple_GET_ITEM(PyList_GET_ITEM(j->slots, s), 2);
        const char *qs = wrapper ? PyUnicode_AsUTF8(q) : NULL;
        PyObject *qn = qs && !strncmp(qs, "_model.", 7) ? PyUnicode_FromString(qs + 7) : Py_NewRef(q);
        if (!qn || (nm && PyDict_SetItemString(j->float8.param_names, nm, qn) < 0)) {
          Py_XDECREF(qn);
          goto trace_fail;
        }
        Py_DECREF(qn);
      }
    }
    th_trace *marked = NULL; /* torchao's Float8Linear modules, inlined float8 functions */
    if (PyErr_Occurred() || pyth_float8_apply_marks(&c.tr, initial, j->float8.param_names, &marked) < 0) goto trace_fail;
    if (j->float8.enabled) {
      int rc = pyth_float8_apply(&j->float8, marked ? marked : initial, &f8);
      th_trace_free(marked);
      if (rc < 0) goto trace_fail;
    } else {
      f8 = marked;
    }
  }
  const th_trace *pre = f8 ? f8 : initial;
  if (st == TH_OK) st = th_transform_dce(pre, &dce);
  if (st == TH_OK) st = th_transform_cse(dce, &cse);
  if (st != TH_OK) {
    th_trace_free(dce);
    th_trace_free(f8);
    pyth_raise(st);
    goto trace_fail;
  }
  e->traces[e->ntraces++] = initial;
  initial = NULL;
  if (f8) e->traces[e->ntraces++] = f8;
  e->traces[e->ntraces++] = dce;
  e->traces[e->ntraces++] = cse;
  th_compile_options o = {0};
  o.executors = j->executors;
  o.nexecutors = j->nexecutors;
  o.dump_dir = j->dump_dir ? PyUnicode_AsUTF8(j->dump_dir) : NULL;
  { /* autograd: grad enabled and an input requires grad -> the grad transform's forward and backward */
    int nin = th_trace_num_inputs(cse);
    bool *rg = PyMem_Calloc((size_t)(nin ? nin : 1), sizeof(bool));
    int on = rg ? grad_inputs(j, e, tl, nin, rg) : (PyErr_NoMemory(), -1);
    if (on > 0 && c.tr.grad_stops) {
      PyErr_SetString(PyExc_NotImplementedError,
                      "thunder_c: detach(), .data and torch.no_grad() inside a jitted function are not supported "
                      "when it is differentiated (inputs or parameters require grad): the grad transform has no "
                      "stop-gradient yet; move them out of the jitted function, or call it under torch.no_grad()");
      on = -1;
    }
    if (on > 0 && pyth_grad_compile(cse, rg, &o, &e->prog, &e->grad) < 0) on = -1;
    PyMem_Free(rg);
    if (on < 0) goto trace_fail;
    if (!on && (st = th_program_compile(cse, &o, &e->prog)) != TH_OK) {
      pyth_raise(st);
      goto trace_fail;
    }
    /* the random stream of every call comes from torch's default generator (rng.c) */
    e->rng_draws = th_program_num_random_ops(e->prog) > 0 ? pyth_rng_eager_draws(cse) : 0;
  }
  goto trace_done;

trace_fail:
  pyth_active = prev;
  pyth_autocast_clear(&c.tr);
  if (entered) {
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    PyObject *r = PyObject_CallMethod(mode, "__exit__", "OOO", Py_None, Py_None, Py_None);
    Py_XDECREF(r);
    PyErr_Restore(et, ev, tb);
  }
  th_trace_free(initial);
  Py_CLEAR(e);
trace_done:
  if (snapshots) {
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    restore_module_attributes(snapshots, false);
    PyErr_Restore(et, ev, tb);
    Py_DECREF(snapshots);
  }
  /* restore the module's parameters */
  if (saved) {
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    for (Py_ssize_t s = 0; s < PyList_GET_SIZE(saved); s++) {
      PyObject *t = PyList_GET_ITEM(saved, s);
      PyObject *slot = PyList_GET_ITEM(j->slots, s);
      if (t) PyDict_SetItem(PyTuple_GET_ITEM(slot, 0), PyTuple_GET_ITEM(slot, 1), t);
    }
    PyErr_Clear();
    PyErr_Restore(et, ev, tb);
    Py_DECREF(saved);
  }
  Py_XDECREF(mode);
  Py_XDECREF(result);
  Py_XDECREF(pargs);
  Py_XDECREF(pkwargs);
  Py_XDECREF(c.tr.lifted_ids);
  Py_XDECREF(c.tr.groups);
  Py_XDECREF(c.inputs);
  Py_XDECREF(c.tr.grad_leaves);
  Py_XDECREF(c.tr.pkg_dir);
  Py_XDECREF(c.tr.torch_dir);
  Py_XDECREF(c.tr.float8_marks);
  return e;
fail:
  free_traces(e->traces, e->ntraces);
  e->ntraces = 0;
  Py_DECREF(e);
  return NULL;
}

/* ---- running --------------------------------------------------------------------------------------- */

static void capsule_destructor(PyObject *cap) {
  if (PyCapsule_IsValid(cap, "dltensor")) {
    DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");
    if (m && m->deleter) m->deleter(m);
  } else {
    PyErr_Clear();
  }
}

/* A torch tensor viewing th_tensor t (which keeps one reference for the capsule); every dtype, bool and
 * fp8 included, crosses with its own DLPack code, so it comes back as torch's dtype with its bits. */
static PyObject *to_torch(th_tensor *t) {
  DLManagedTensor *m = th_tensor_to_dlpack(t);
  if (!m) return pyth_raise(th_last_status());
  PyObject *cap = PyCapsule_New(m, "dltensor", capsule_destructor);
  if (!cap) {
    m->deleter(m);
    return NULL;
  }
  PyObject *r = PyObject_CallOneArg(pyth_T.from_dlpack, cap);
  Py_DECREF(cap);
  return r;
}

/* DLPack both ways for thunder_c.extend's Python kernels (extend.c), as a run's outputs and inputs. */
PyObject *pyth_tensor_to_torch(th_tensor *t) { return to_torch(t); }

th_tensor *pyth_tensor_from_torch(PyObject *t) {
  PyObject *cap = NULL;
  DLManagedTensor *m = NULL;
  if (export_tensor(t, NULL, &cap, &m) < 0) return NULL;
  th_tensor *r = th_tensor_from_dlpack(m);
  if (r) PyCapsule_SetName(cap, "used_dltensor"); /* r owns the export now */
  Py_DECREF(cap);
  if (!r) pyth_raise(th_last_status());
  return r;
}

static _Thread_local const th_trace *g_out_trace; /* the trace whose outputs build_output converts */
static _Thread_local PyObject *g_leaves;          /* tuple: tensor leaves to use instead (autograd) */
static _Thread_local Py_ssize_t g_leaf_k;

/* Rebuilds the return structure: one output tensor per leaf, in the program's order. */
static PyObject *build_output(const th_arg *a, th_tensor **outs, int nouts, int *k) {
  switch (a->kind) {
    case TH_ARG_TUPLE:
    case TH_ARG_LIST: {
      PyObject *r = a->kind == TH_ARG_TUPLE ? PyTuple_New(a->u.seq.n) : PyList_New(a->u.seq.n);
      for (int i = 0; r && i < a->u.seq.n; i++) {
        PyObject *x = build_output(&a->u.seq.items[i], outs, nouts, k);
        if (!x) return Py_DECREF(r), NULL;
        if (a->kind == TH_ARG_TUPLE) PyTuple_SET_ITEM(r, i, x);
        else PyList_SET_ITEM(r, i, x);
      }
      return r;
    }
    case TH_ARG_DICT: {
      PyObject *r = PyDict_New();
      for (int i = 0; r && i < a->u.seq.n; i++) {
        PyObject *x = build_output(&a->u.seq.items[i], outs, nouts, k);
        if (!x || PyDict_SetItemString(r, a->u.seq.keys[i], x) < 0) Py_CLEAR(r);
        Py_XDECREF(x);
      }
      return r;
    }
    default: break;
  }
  int i = (*k)++;
  th_tensor *t = i < nouts ? outs[i] : NULL;
  if (a->kind == TH_ARG_VALUE && th_value_is_tensor(a->u.value) && g_leaves) {
    if (g_leaf_k >= PyTuple_GET_SIZE(g_leaves))
      return PyErr_SetString(PyExc_RuntimeError, "thunder_c: internal error: too few output tensors"), NULL;
    return Py_NewRef(PyTuple_GET_ITEM(g_leaves, g_leaf_k++));
  }
  if (a->kind == TH_ARG_VALUE && th_value_is_tensor(a->u.value)) {
    if (!t) return PyErr_SetString(PyExc_RuntimeError, "thunder_c: the program produced no tensor for an output"), NULL;
    /* CSE may return one computed buffer for two outputs (return x * 2, x * 2); eager returns two
     * tensors, so the second is a copy. (An input returned twice stays one tensor, as in eager.) */
    bool again = false;
    for (int p = 0; p < i && !again; p++) again = outs[p] == t;
    if (again) {
      bool input = false;
      for (int q = 0; q < th_trace_num_inputs(g_out_trace) && !input; q++) input = th_trace_input(g_out_trace, q) == a->u.value;
      if (!input) {
        th_tensor *c = th_tensor_contiguous_copy(t);
        if (!c) return pyth_raise(th_last_status());
        PyObject *r = to_torch(c);
        th_tensor_release(c);
        return r;
      }
    }
    return to_torch(t);
  }
  if (a->kind == TH_ARG_VALUE || a->kind == TH_ARG_INT || a->kind == TH_ARG_FLOAT || a->kind == TH_ARG_BOOL) {
    if (t) {
      double f = th_tensor_get_f64(t, 0);
      th_dtype dt = th_tensor_dtype(t);
      if (dt == TH_BOOL) return PyBool_FromLong(f != 0);
      if (dt == TH_F64 || dt == TH_F32) return PyFloat_FromDouble(f);
      return PyLong_FromLongLong((long long)f);
    }
  }
  return pyth_from_arg(NULL, a);
}

PyObject *pyth_build_output(const th_trace *tr, const th_arg *a, th_tensor **outs, int nouts, PyObject *tensor_leaves) {
  int k = 0;
  g_out_trace = tr;
  g_leaves = tensor_leaves;
  g_leaf_k = 0;
  PyObject *r = build_output(a, outs, nouts, &k);
  g_leaves = NULL;
  return r;
}

/* A call under autograd: the caller's tensor of each program input (as run_entry binds them), then the
 * forward program and autograd.Function (autograd.c). */
static PyObject *run_grad(pyth_jit *j, pyth_entry *e, tensor_list *tl, th_tensor **in, int nin) {
  PyObject **objs = PyMem_Calloc((size_t)(nin ? nin : 1), sizeof *objs);
  if (!objs) return PyErr_NoMemory();
  int nl = (int)PyList_GET_SIZE(e->lifted);
  for (int i = 0; i < tl->n; i++) {
    int ix = tensor_input_index(j, e, i);
    if (ix >= 0 && ix < nin && !objs[ix]) objs[ix] = tl->t[i].tensor;
  }
  for (int i = 0; i < nl; i++) objs[nin - nl + i] = PyList_GET_ITEM(e->lifted, i);
  PyObject *res = NULL;
  for (int i = 0; i < nin; i++)
    if (!objs[i]) {
      PyErr_Format(PyExc_RuntimeError, "thunder_c: internal error: no tensor for input %d", i);
      goto done;
    }
  res = pyth_grad_run(e->grad, (PyObject *)e, e->prog, nin, in, objs);
done:
  PyMem_Free(objs);
  return res;
}

static PyObject *run_entry(pyth_jit *j, pyth_entry *e, tensor_list *tl) {
  int nin = e->prog ? th_program_num_inputs(e->prog) : 0; /* collection inputs (jit(backward)) by their leaves */
  int nargs = e->nargs_tensors, nparams = e->nparams_in, nl = (int)PyList_GET_SIZE(e->lifted);
  th_tensor *stack_in[16];
  th_tensor **in = nin <= 16 ? stack_in : PyMem_Calloc((size_t)nin, sizeof *in);
  PyObject *extra_caps = NULL;
  PyObject *res = NULL;
  th_tensor **outs = NULL;
  int nouts = 0, made = 0;
  if (!in) return PyErr_NoMemory();
  int expected = nargs + (j->is_module ? (int)PyList_GET_SIZE(j->slots) : 0);
  if (tl->n != expected) { /* cache="same input" with other inputs */
    PyErr_Format(PyExc_ValueError, "thunder_c: this compiled program takes %d tensor arguments, got %d "
                 "(with cache='same input' the inputs must keep their structure)", nargs, tl->n - (expected - nargs));
    goto done;
  }
  if (nargs + nparams + nl != nin) {
    PyErr_Format(PyExc_RuntimeError, "thunder_c: internal error: %d inputs expected, %d available", nin, nargs + nparams + nl);
    goto done;
  }
  /* arguments, then distinct parameters (in slot order), then captured tensors */
  for (int i = 0; i < nargs; i++) {
    DLManagedTensor *m = tl->t[i].m;
    th_tensor *t = th_tensor_from_dlpack(m);
    if (!t) {
      pyth_raise(th_last_status());
      goto done;
    }
    PyCapsule_SetName(tl->t[i].capsule, "used_dltensor");
    in[made++] = t;
  }
  if (j->is_module) {
    Py_ssize_t ns = PyList_GET_SIZE(j->slots);
    for (Py_ssize_t s = 0; s < ns; s++) {
      int idx = e->param_input[s];
      if (idx < 0 || idx != made) continue; /* shared or None */
      call_tensor *c = &tl->t[nargs + (int)s];
      th_tensor *t = th_tensor_from_dlpack(c->m);
      if (!t) {
        pyth_raise(th_last_status());
        goto done;
      }
      PyCapsule_SetName(c->capsule, "used_dltensor");
      in[made++] = t;
    }
  }
  if (nl) {
    extra_caps = PyList_New(0);
    for (int i = 0; extra_caps && i < nl; i++) {
      PyObject *cap = NULL;
      DLManagedTensor *m = NULL;
      if (export_tensor(PyList_GET_ITEM(e->lifted, i), NULL, &cap, &m) < 0) goto done;
      th_tensor *tt = th_tensor_from_dlpack(m);
      if (!tt) {
        if (m) pyth_raise(th_last_status());
        Py_XDECREF(cap);
        goto done;
      }
      PyCapsule_SetName(cap, "used_dltensor");
      Py_DECREF(cap);
      in[made++] = tt;
    }
    if (!extra_caps) goto done;
  }
  if (made != nin) {
    PyErr_Format(PyExc_RuntimeError, "thunder_c: internal error: made %d of %d inputs", made, nin);
    goto done;
  }
  if (e->rng_draws > 0 && pyth_rng_begin(e->prog, e->rng_draws) < 0) goto done;
  if (e->grad) { /* under autograd: the forward program behind thunder_c's autograd.Function */
    res = run_grad(j, e, tl, in, nin);
    goto done;
  }
  th_status st = th_program_run(e->prog, nin, in, &nouts, &outs);
  if (st != TH_OK) {
    pyth_raise(st);
    goto done;
  }
  th_arg ret = th_trace_output(th_program_trace(e->prog));
  int k = 0;
  g_out_trace = th_program_trace(e->prog);
  res = build_output(&ret, outs, nouts, &k);
done:
  for (int i = 0; i < made; i++) th_tensor_release(in[i]);
  if (in != stack_in) PyMem_Free(in);
  for (int i = 0; i < nouts; i++) th_tensor_release(outs[i]);
  free(outs);
  Py_XDECREF(extra_caps);
  return res;
}

/* Whether the tensors an entry captured still have the dtype and shape its trace recorded. */
static bool lifted_still_match(pyth_entry *e) {
  Py_ssize_t nl = PyList_GET_SIZE(e->lifted);
  if (!nl || !e->prog) return true;
  const th_trace *tr = th_program_trace(e->prog);
  int base = th_trace_num_inputs(tr) - (int)nl;
  for (Py_ssize_t i = 0; i < nl; i++) {
    PyObject *t = PyList_GET_ITEM(e->lifted, i);
    const th_value *v = th_trace_input(tr, base + (int)i);
    PyObject *dt = PyObject_GetAttr(t, s_dtype), *shape = PyObject_GetAttrString(t, "shape");
    th_dtype d;
    bool ok = dt && shape && pyth_dtype_from(dt, &d) && d == th_value_dtype(v) && PyTuple_Check(shape) &&
              PyTuple_GET_SIZE(shape) == th_value_ndim(v);
    for (int k = 0; ok && k < th_value_ndim(v); k++)
      ok = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, k)) == th_value_shape(v)[k];
    Py_XDECREF(dt);
    Py_XDECREF(shape);
    PyErr_Clear();
    if (!ok) return false;
  }
  return true;
}

static PyObject *jit_call(PyObject *self, PyObject *args, PyObject *kwargs) {
  pyth_jit *j = (pyth_jit *)self;
  if (kwargs && PyDict_Size(kwargs) == 0) kwargs = NULL;
  /* a jitted function called while another is traced is inlined into that trace (whatever its
   * arguments: a result computed now would be baked into the outer trace as a constant) */
  if (pyth_active && !j->given_trace) {
    /* with float8=..., its linears are marked: the outer jit converts them with these options */
    int start = j->float8.enabled ? th_trace_num_bsyms(pyth_active->trace) : 0;
    PyObject *r = PyObject_Call(j->fn, args, kwargs);
    if (r && j->float8.enabled &&
        pyth_float8_mark_region(pyth_active, start, j->float8.opts.input_dtype, j->float8.opts.weight_dtype,
                                j->float8.filter, "a float8 function", false) < 0)
      Py_CLEAR(r);
    return r;
  }
  if (j->given_trace && kwargs)
    return PyErr_SetString(PyExc_TypeError, "a jitted trace takes its inputs positionally"), NULL;
  kbuf k = {.p = NULL, .n = 0, .cap = sizeof k.local};
  k.p = k.local;
  tensor_list tl = {.n = 0, .cap = 8};
  tl.t = tl.local;
  PyObject *res = NULL, *ids = NULL, *seen_slots = NULL;
  pyth_entry *e = NULL;
  if (j->is_module) {
    int changed = structure_changed(j);
    if (changed < 0) goto done;
    if (changed) { /* the module was edited since its slots were collected: start over */
      if (collect_slots(j) < 0) goto done;
      PyDict_Clear(j->cache);
      Py_CLEAR(j->last);
    }
  }
  if (key_state(&k) < 0 || walk(args, &k, &tl, &ids, 0) < 0 || (kwargs && walk(kwargs, &k, &tl, &ids, 0) < 0) ||
      key_function_reads(&k, j->code_fn) < 0)
    goto done;
  for (Py_ssize_t s = 0; j->attr_slots && s < PyList_GET_SIZE(j->attr_slots); s++) {
    PyObject *slot = PyList_GET_ITEM(j->attr_slots, s);
    PyObject *v = PyDict_GetItemWithError(PyTuple_GET_ITEM(slot, 0), PyTuple_GET_ITEM(slot, 1));
    if (!v && PyErr_Occurred()) goto done;
    if (v ? key_capture(&k, v) < 0 : kb_byte(&k, '-') < 0) goto done;
  }
  if (j->is_module) {
    Py_ssize_t ns = PyList_GET_SIZE(j->slots);
    if (kb_byte(&k, 'P') < 0 || !(seen_slots = PyDict_New())) goto done;
    for (Py_ssize_t s = 0; s < ns; s++) {
      PyObject *slot = PyList_GET_ITEM(j->slots, s);
      PyObject *t = PyDict_GetItemWithError(PyTuple_GET_ITEM(slot, 0), PyTuple_GET_ITEM(slot, 1));
      if (!t) {
        if (!PyErr_Occurred())
          PyErr_Format(PyExc_RuntimeError, "thunder_c: the module's parameter %U was removed; jit the module again",
                       PyTuple_GET_ITEM(slot, 2));
        goto done;
      }
      /* the first slot holding this very object (shared parameters): a dict, not a scan */
      int32_t same = (int32_t)s;
      PyObject *idk = PyLong_FromVoidPtr(t);
      PyObject *prev = idk ? PyDict_GetItemWithError(seen_slots, idk) : NULL;
      if (prev) same = (int32_t)PyLong_AsLong(prev);
      else if (!idk || PyErr_Occurred()) {
        Py_XDECREF(idk);
        goto done;
      } else {
        PyObject *sv = PyLong_FromSsize_t(s);
        int r = sv ? PyDict_SetItem(seen_slots, idk, sv) : -1;
        Py_XDECREF(sv);
        if (r < 0) {
          Py_DECREF(idk);
          goto done;
        }
      }
      Py_DECREF(idk);
      if (kb_put(&k, &same, sizeof same) < 0) goto done;
      /* every slot is exported (shared ones too) so slot s is tl entry nargs + s */
      if (t == Py_None) {
        if (kb_byte(&k, 'n') < 0) goto done;
        /* keep the slot numbering: export a placeholder (never used: param_input is -1) */
        PyObject *z = PyObject_CallMethod(pyth_T.torch, "empty", "i", 0);
        if (!z || tl_add(&tl, z) < 0) {
          Py_XDECREF(z);
          goto done;
        }
        Py_DECREF(z); /* the capsule keeps its storage */
      } else if (!PyObject_TypeCheck(t, (PyTypeObject *)pyth_T.tensor_type)) {
        PyErr_Format(PyExc_TypeError, "thunder_c: the module's parameter %U is a %s, not a tensor",
                     PyTuple_GET_ITEM(slot, 2), Py_TYPE(t)->tp_name);
        goto done;
      } else if (tl_add(&tl, t) < 0 || key_tensor(&k, &tl.t[tl.n - 1]) < 0) {
        goto done;
      }
    }
    for (Py_ssize_t s = 0; s < PyList_GET_SIZE(j->submodules); s++) {
      PyObject *tr = PyObject_GetAttr(PyList_GET_ITEM(j->submodules, s), s_training);
      if (!tr) goto done;
      int b = PyObject_IsTrue(tr);
      Py_DECREF(tr);
      if (b < 0 || kb_byte(&k, (char)b) < 0) goto done;
    }
  }
  if (key_aliasing(&k, &tl) < 0) goto done;

  PyObject *key = PyBytes_FromStringAndSize(k.p, (Py_ssize_t)k.n);
  if (!key) goto done;
  if (j->mode == CACHE_CONSTANT_VALUES) {
    e = (pyth_entry *)PyDict_GetItemWithError(j->cache, key);
    Py_XINCREF(e);
  } else if (j->mode == CACHE_SAME_INPUT && j->last) {
    e = (pyth_entry *)Py_NewRef(j->last);
  }
  if (!e && PyErr_Occurred()) {
    Py_DECREF(key);
    goto done;
  }
  if (e && !lifted_still_match(e)) { /* a captured tensor changed shape or dtype: trace again */
    if (PyErr_Occurred()) {
      Py_DECREF(key);
      goto done;
    }
    Py_CLEAR(e);
  }
  if (e) {
    j->hits++;
  } else {
    j->misses++;
    if (pyth_dispatch_init() < 0 || !(e = compile_entry(j, args, kwargs, &tl))) {
      Py_DECREF(key);
      goto done;
    }
    /* objects whose identity is in the key stay alive with the entry (so their ids are not reused) */
    if ((ids && PyList_Append(e->pinned, ids) < 0) || pyth_extend_pin(e->prog, e->pinned) < 0 ||
        pyth_extend_pin(pyth_grad_backward_program(e->grad), e->pinned) < 0 ||
        (j->mode == CACHE_CONSTANT_VALUES && PyDict_SetItem(j->cache, key, (PyObject *)e) < 0)) {
      Py_DECREF(key);
      goto done;
    }
  }
  Py_DECREF(key);
  Py_XSETREF(j->last, Py_NewRef((PyObject *)e));
  res = run_entry(j, e, &tl);
done:
  Py_XDECREF(e);
  Py_XDECREF(ids);
  Py_XDECREF(seen_slots);
  tl_free(&tl);
  kb_free(&k);
  return res;
}

/* jit(fn_or_module_or_trace, executors=None, cache="constant values", float8=None, dump_fusions=None) */
static PyObject *jit_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
  static char *kwl[] = {"fn", "executors", "cache", "float8", "dump_fusions", NULL};
  PyObject *fn, *execs = Py_None, *float8 = Py_None, *dump = Py_None;
  const char *cache = "constant values";
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OzOO:jit", kwl, &fn, &execs, &cache, &float8, &dump)) return NULL;
  cache_mode mode;
  if (!cache || !strcmp(cache, "constant values")) mode = CACHE_CONSTANT_VALUES;
  else if (!strcmp(cache, "same input")) mode = CACHE_SAME_INPUT;
  else if (!strcmp(cache, "no caching")) mode = CACHE_NONE;
  else if (!strcmp(cache, "symbolic values"))
    return PyErr_SetString(PyExc_NotImplementedError,
                           "jit: cache='symbolic values' is not supported by thunder_c; use 'constant values', "
                           "'same input' or 'no caching'"), NULL;
  else
    return PyErr_Format(PyExc_ValueError,
                        "jit: unknown cache option '%s' (expected 'constant values', 'same input' or 'no caching')",
                        cache), NULL;
  bool is_trace = Py_TYPE(fn) == &pyth_trace_type;
  if (!is_trace && !PyCallable_Check(fn))
    return PyErr_Format(PyExc_TypeError, "jit: expected a function, an nn.Module or a Trace, got %s", Py_TYPE(fn)->tp_name), NULL;
  if (dump != Py_None) {
    dump = PyOS_FSPath(dump); /* str or os.PathLike */
    if (!dump || !PyUnicode_Check(dump)) {
      if (!dump) PyErr_Clear();
      Py_XDECREF(dump);
      return PyErr_SetString(PyExc_TypeError, "jit: dump_fusions must be a directory path (str or os.PathLike)"), NULL;
    }
  } else {
    dump = NULL;
  }
  pyth_jit *j = (pyth_jit *)type->tp_alloc(type, 0);
  if (!j) {
    Py_XDECREF(dump);
    return NULL;
  }
  j->dump_dir = dump; /* owned */
  j->fn = Py_NewRef(fn);
  j->mode = mode;
  j->cache = PyDict_New();
  j->given_trace = is_trace ? pyth_trace_get(fn) : NULL;
  if (!j->cache) goto fail;
  if (pyth_float8_parse(float8, &j->float8, "jit") < 0) goto fail;
  if (execs != Py_None) {
    PyObject *l = PyUnicode_Check(execs) ? PyList_New(1) : PySequence_List(execs); /* "blas" = ["blas"] */
    if (l && PyUnicode_Check(execs)) PyList_SET_ITEM(l, 0, Py_NewRef(execs));
    if (!l) goto fail;
    j->executor_names = PyList_New(0);
    Py_ssize_t n = PyList_GET_SIZE(l);
    j->executors = PyMem_Calloc((size_t)(n ? n : 1), sizeof(char *));
    for (Py_ssize_t i = 0; j->executors && j->executor_names && i < n; i++) {
      PyObject *x = PyList_GET_ITEM(l, i);
      PyObject *name = PyUnicode_Check(x) ? Py_NewRef(x) : PyObject_GetAttrString(x, "name");
      if (!name || !PyUnicode_Check(name)) {
        Py_XDECREF(name);
        PyErr_Format(PyExc_TypeError, "jit: executors must be names ('blas', 'eager'), got %s", Py_TYPE(x)->tp_name);
        Py_DECREF(l);
        goto fail;
      }
      PyList_Append(j->executor_names, name);
      j->executors[i] = PyUnicode_AsUTF8(name);
      Py_DECREF(name);
    }
    for (Py_ssize_t i = 0; j->executor_names && i < n; i++)
      if (!PyUnicode_Check(PyList_GET_ITEM(l, i))) PyList_Append(j->executor_names, PyList_GET_ITEM(l, i));
    j->nexecutors = (int)n;
    Py_DECREF(l);
    if (!j->executors || !j->executor_names) goto fail;
  }
  PyObject *module_type = PyObject_GetAttrString(pyth_T.torch, "nn");
  PyObject *mt = module_type ? PyObject_GetAttrString(module_type, "Module") : NULL;
  Py_XDECREF(module_type);
  if (!mt) goto fail;
  j->is_module = !is_trace && PyObject_IsInstance(fn, mt) == 1;
  Py_DECREF(mt);
  if (j->is_module) {
    if (collect_slots(j) < 0) goto fail;
    PyObject *fwd = PyObject_GetAttrString(fn, "forward");
    j->arg_names = fwd ? param_names(fwd, true) : NULL;
    if (fwd && PyMethod_Check(fwd)) j->code_fn = Py_NewRef(PyMethod_GET_FUNCTION(fwd));
    Py_XDECREF(fwd);
  } else {
    PyObject *inner = pyth_autocast_inner(fn); /* jit(autocast(f)): inputs named after f's parameters */
    PyObject *f = inner ? inner : fn;
    j->arg_names = is_trace ? PyList_New(0) : param_names(f, false);
    if (PyMethod_Check(f)) f = PyMethod_GET_FUNCTION(f);
    if (!is_trace && PyFunction_Check(f)) j->code_fn = Py_NewRef(f);
  }
  if (!j->arg_names) goto fail;
  return (PyObject *)j;
fail:
  Py_DECREF(j);
  return NULL;
}

static PyObject *jit_get_fn(PyObject *o, void *c) {
  (void)c;
  return Py_NewRef(((pyth_jit *)o)->fn);
}

static PyGetSetDef jit_getset[] = {
    {"__wrapped__", jit_get_fn, NULL, "the function, module or trace that was jitted", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject pyth_jit_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "thunder_c.JitFunction",
    .tp_basicsize = sizeof(pyth_jit),
    .tp_dealloc = jit_dealloc,
    .tp_call = jit_call,
    .tp_traverse = jit_traverse,
    .tp_clear = jit_clear,
    .tp_new = jit_new,
    .tp_getset = jit_getset,
    .tp_weaklistoffset = offsetof(pyth_jit, weakrefs),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "jit(fn, executors=None, cache='constant values', float8=None, dump_fusions=None): a function, nn.Module or Trace compiled by "
              "thunder-c. Calling it traces on a cache miss and runs the compiled program.",
};

/* ---- introspection ---------------------------------------------------------------------------------- */

/* The jitted callable of o (itself, or a ThunderModule's _thunder_jit): a new reference, or NULL with
 * TypeError. */
static pyth_jit *as_jit(PyObject *o) {
  if (PyObject_TypeCheck(o, &pyth_jit_type)) return (pyth_jit *)Py_NewRef(o);
  PyObject *inner = PyObject_GetAttrString(o, "_thunder_jit");
  if (inner && PyObject_TypeCheck(inner, &pyth_jit_type)) return (pyth_jit *)inner;
  Py_XDECREF(inner);
  PyErr_Clear();
  PyErr_Format(PyExc_TypeError, "%R doesn't seem to be a thunder compiled function.", o);
  return NULL;
}

static PyObject *m_last_traces(PyObject *self, PyObject *o) {
  (void)self;
  pyth_jit *j = as_jit(o);
  if (!j) return NULL;
  if (!j->last) {
    Py_DECREF(j);
    return PyErr_Format(PyExc_TypeError, "%R doesn't seem to have been called yet.", o), NULL;
  }
  pyth_entry *e = (pyth_entry *)j->last;
  PyObject *l = PyList_New(0);
  for (int i = 0; l && i < e->ntraces; i++) {
    PyObject *t = pyth_trace_wrap(e->traces[i], (PyObject *)e);
    if (!t || PyList_Append(l, t) < 0) Py_CLEAR(l);
    Py_XDECREF(t);
  }
  if (l && e->grad) { /* under autograd: the grad transform's forward, then the forward program's */
    PyObject *t = pyth_trace_wrap(pyth_grad_forward_trace(e->grad), (PyObject *)e);
    if (!t || PyList_Append(l, t) < 0) Py_CLEAR(l);
    Py_XDECREF(t);
  }
  if (l && e->prog) {
    PyObject *t = pyth_trace_wrap(th_program_trace(e->prog), (PyObject *)e);
    if (!t || PyList_Append(l, t) < 0) Py_CLEAR(l);
    Py_XDECREF(t);
  }
  Py_DECREF(j);
  return l;
}

static PyObject *m_last_backward_traces(PyObject *self, PyObject *o) {
  (void)self;
  pyth_jit *j = as_jit(o);
  if (!j) return NULL;
  if (!j->last) {
    Py_DECREF(j);
    return PyErr_Format(PyExc_TypeError, "%R doesn't seem to have been called yet.", o), NULL;
  }
  pyth_entry *e = (pyth_entry *)j->last;
  PyObject *l = e->grad ? pyth_grad_backward_traces(e->grad, (PyObject *)e) : PyList_New(0);
  Py_DECREF(j);
  return l;
}

static PyObject *m_cache_hits(PyObject *self, PyObject *o) {
  (void)self;
  pyth_jit *j = as_jit(o);
  PyObject *r = j ? PyLong_FromLongLong(j->hits) : NULL;
  Py_XDECREF(j);
  return r;
}

static PyObject *m_cache_misses(PyObject *self, PyObject *o) {
  (void)self;
  pyth_jit *j = as_jit(o);
  PyObject *r = j ? PyLong_FromLongLong(j->misses) : NULL;
  Py_XDECREF(j);
  return r;
}

static PyObject *m_set_mode_class(PyObject *self, PyObject *cls) {
  (void)self;
  Py_XSETREF(mode_class, Py_NewRef(cls));
  Py_RETURN_NONE;
}

static PyObject *m_set_module_hook(PyObject *self, PyObject *fn) {
  (void)self;
  Py_XSETREF(module_hook, Py_NewRef(fn));
  Py_RETURN_NONE;
}

static PyMethodDef jit_functions[] = {
    {"last_traces", m_last_traces, METH_O,
     "last_traces(jfn) -> list of Trace: the traces of the last call's compilation, in pipeline order "
     "(initial, Dead Code Elimination, Common Subexpression Elimination, Delete Last Used)."},
    {"last_backward_traces", m_last_backward_traces, METH_O,
     "last_backward_traces(jfn) -> list of Trace: the backward of the last call's compilation under autograd "
     "(Grad transform pass, Delete Last Used); [] when it ran forward only."},
    {"cache_hits", m_cache_hits, METH_O, "cache_hits(jfn) -> int: calls that reused a compiled program."},
    {"cache_misses", m_cache_misses, METH_O, "cache_misses(jfn) -> int: calls that traced and compiled."},
    {"_set_mode_class", m_set_mode_class, METH_O, "internal: the TorchFunctionMode subclass to enter while tracing."},
    {"_set_module_hook", m_set_module_hook, METH_O,
     "internal: hook(submodules) -> undo callable or None, called before a module is traced (thunder_c._torchao)."},
    {NULL, NULL, 0, NULL},
};

int pyth_jit_ready(PyObject *m) {
  if (PyType_Ready(&pyth_jit_type) < 0 || PyType_Ready(&entry_type) < 0) return -1;
  if (!(s_dtype = PyUnicode_InternFromString("dtype")) ||
      !(s_is_neg = PyUnicode_InternFromString("is_neg")) ||
      !(s_requires_grad = PyUnicode_InternFromString("requires_grad")) || !(s_detach = PyUnicode_InternFromString("detach")) ||
      !(s_training = PyUnicode_InternFromString("training")) || !(s_parameters = PyUnicode_InternFromString("_parameters")) ||
      !(s_buffers = PyUnicode_InternFromString("_buffers")) || !(s_enter = PyUnicode_InternFromString("__enter__")) ||
      !(s_exit = PyUnicode_InternFromString("__exit__")))
    return -1;
  if (PyModule_AddObjectRef(m, "jit", (PyObject *)&pyth_jit_type) < 0) return -1;
  return PyModule_AddFunctions(m, jit_functions);
}
