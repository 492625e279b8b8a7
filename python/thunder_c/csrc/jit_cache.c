/* jit_cache.c — the cache key of a jitted call (jit_internal.h).
 *
 * A call flattens its arguments (tuples, lists, dicts; for a module also its parameters and buffers,
 * read afresh every call) and exports every tensor by DLPack. The key is built from what the DLPack
 * records say (dtype, shape, strides, device) plus requires_grad, which inputs share memory, the values
 * of non-tensor arguments ("constant values"), what the function reads besides its arguments (its
 * closure and the globals it names), the training flags of a module's submodules, and the caller's
 * autocast and grad state. */
#include <stdlib.h>
#include <string.h>

#include "jit_internal.h"

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

void jit_tl_free(tensor_list *l) {
  for (int i = 0; i < l->n; i++) Py_XDECREF(l->t[i].capsule);
  if (l->t != l->local) PyMem_Free(l->t);
}

/* Exports torch tensor t by DLPack: a new capsule and its managed tensor. A tensor that requires grad
 * is exported detached (no autograd graph is recorded). torch labels bool and fp8 tensors with DLPack
 * 1.x's codes (kDLBool, kDLFloat8_e4m3fn, kDLFloat8_e5m2), which th_tensor_from_dlpack reads. */
int jit_export_tensor(PyObject *t, bool *requires_grad, PyObject **capsule, DLManagedTensor **managed) {
  if (pyth_tensor_check_class(t, "a tensor of the call (an argument, parameter or buffer)") < 0) return -1;
  PyObject *rg = PyObject_GetAttr(t, jit_s.requires_grad);
  if (!rg) return -1;
  bool req = rg == Py_True;
  Py_DECREF(rg);
  PyObject *src = req ? PyObject_CallMethodNoArgs(t, jit_s.detach) : Py_NewRef(t);
  if (!src) return -1;
  /* a lazily negated or conjugated view (z.conj().imag) exports its raw memory: resolve it first */
  PyObject *neg = PyObject_CallMethodNoArgs(src, jit_s.is_neg);
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
    call_tensor *q =
      l->t == l->local ? PyMem_Malloc(sizeof *q * (size_t)cap) : PyMem_Realloc(l->t, sizeof *q * (size_t)cap);
    if (!q) return PyErr_NoMemory(), -1;
    if (l->t == l->local) memcpy(q, l->local, sizeof *q * (size_t)l->n);
    l->t = q;
    l->cap = cap;
  }
  bool req;
  PyObject *cap;
  DLManagedTensor *m;
  if (jit_export_tensor(t, &req, &cap, &m) < 0) return -1;
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
int jit_alias_roots(const tensor_list *l, int32_t *first) {
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
  int rc = jit_alias_roots(l, first);
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

/* The key's header: autocast and grad state of the caller, and torch's default dtype. */
static int key_state(kbuf *k) {
  PyObject *dd = PyObject_CallNoArgs(pyth_T.get_default_dtype);
  th_dtype ddt = TH_F32;
  if (!dd) return -1;
  bool known = pyth_dtype_from(dd, &ddt);
  Py_DECREF(dd);
  if (kb_byte(k, known ? (char)ddt : 99) < 0) return -1;
  PyObject *v[5] = {PyObject_CallNoArgs(pyth_T.is_autocast_cpu_enabled),
                    PyObject_CallNoArgs(pyth_T.get_autocast_cpu_dtype), PyObject_CallNoArgs(pyth_T.is_autocast_enabled),
                    PyObject_CallNoArgs(pyth_T.get_autocast_gpu_dtype), PyObject_CallNoArgs(pyth_T.is_grad_enabled)};
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

/* ---- the key ------------------------------------------------------------------------------------------ */

/* A module's part of the key: per parameter slot the first slot holding the same object (shared
 * parameters) and the tensor's record (every slot is exported into tl, shared ones too, so slot s is tl
 * entry nargs + s), then each submodule's training flag. */
static int key_module(pyth_jit *j, kbuf *k, tensor_list *tl) {
  PyObject *seen_slots = NULL;
  Py_ssize_t ns = PyList_GET_SIZE(j->slots);
  if (kb_byte(k, 'P') < 0 || !(seen_slots = PyDict_New())) goto fail;
  for (Py_ssize_t s = 0; s < ns; s++) {
    PyObject *slot = PyList_GET_ITEM(j->slots, s);
    PyObject *t = PyDict_GetItemWithError(PyTuple_GET_ITEM(slot, 0), PyTuple_GET_ITEM(slot, 1));
    if (!t) {
      if (!PyErr_Occurred())
        PyErr_Format(PyExc_RuntimeError, "thunder_c: the module's parameter %U was removed; jit the module again",
                     PyTuple_GET_ITEM(slot, 2));
      goto fail;
    }
    /* the first slot holding this very object (shared parameters): a dict, not a scan */
    int32_t same = (int32_t)s;
    PyObject *idk = PyLong_FromVoidPtr(t);
    PyObject *prev = idk ? PyDict_GetItemWithError(seen_slots, idk) : NULL;
    if (prev)
      same = (int32_t)PyLong_AsLong(prev);
    else if (!idk || PyErr_Occurred()) {
      Py_XDECREF(idk);
      goto fail;
    } else {
      PyObject *sv = PyLong_FromSsize_t(s);
      int r = sv ? PyDict_SetItem(seen_slots, idk, sv) : -1;
      Py_XDECREF(sv);
      if (r < 0) {
        Py_DECREF(idk);
        goto fail;
      }
    }
    Py_DECREF(idk);
    if (kb_put(k, &same, sizeof same) < 0) goto fail;
    /* every slot is exported (shared ones too) so slot s is tl entry nargs + s */
    if (t == Py_None) {
      if (kb_byte(k, 'n') < 0) goto fail;
      /* keep the slot numbering: export a placeholder (never used: param_input is -1) */
      PyObject *z = PyObject_CallMethod(pyth_T.torch, "empty", "i", 0);
      if (!z || tl_add(tl, z) < 0) {
        Py_XDECREF(z);
        goto fail;
      }
      Py_DECREF(z); /* the capsule keeps its storage */
    } else if (!PyObject_TypeCheck(t, (PyTypeObject *)pyth_T.tensor_type)) {
      PyErr_Format(PyExc_TypeError, "thunder_c: the module's parameter %U is a %s, not a tensor",
                   PyTuple_GET_ITEM(slot, 2), Py_TYPE(t)->tp_name);
      goto fail;
    } else if (tl_add(tl, t) < 0 || key_tensor(k, &tl->t[tl->n - 1]) < 0) {
      goto fail;
    }
  }
  for (Py_ssize_t s = 0; s < PyList_GET_SIZE(j->submodules); s++) {
    PyObject *tr = PyObject_GetAttr(PyList_GET_ITEM(j->submodules, s), jit_s.training);
    if (!tr) goto fail;
    int b = PyObject_IsTrue(tr);
    Py_DECREF(tr);
    if (b < 0 || kb_byte(k, (char)b) < 0) goto fail;
  }
  Py_DECREF(seen_slots);
  return 0;
fail:
  Py_XDECREF(seen_slots);
  return -1;
}

PyObject *jit_cache_key(pyth_jit *j, PyObject *args, PyObject *kwargs, tensor_list *tl, PyObject **ids) {
  kbuf kb = {.p = NULL, .n = 0, .cap = sizeof kb.local};
  kb.p = kb.local;
  if (key_state(&kb) < 0 || walk(args, &kb, tl, ids, 0) < 0 || (kwargs && walk(kwargs, &kb, tl, ids, 0) < 0) ||
      key_function_reads(&kb, j->code_fn) < 0)
    goto fail;
  for (Py_ssize_t s = 0; j->attr_slots && s < PyList_GET_SIZE(j->attr_slots); s++) {
    PyObject *slot = PyList_GET_ITEM(j->attr_slots, s);
    PyObject *v = PyDict_GetItemWithError(PyTuple_GET_ITEM(slot, 0), PyTuple_GET_ITEM(slot, 1));
    if (!v && PyErr_Occurred()) goto fail;
    if (v ? key_capture(&kb, v) < 0 : kb_byte(&kb, '-') < 0) goto fail;
  }
  if (j->is_module && key_module(j, &kb, tl) < 0) goto fail;
  if (key_aliasing(&kb, tl) < 0) goto fail;
  PyObject *key = PyBytes_FromStringAndSize(kb.p, (Py_ssize_t)kb.n);
  kb_free(&kb);
  return key;
fail:
  kb_free(&kb);
  return NULL;
}
