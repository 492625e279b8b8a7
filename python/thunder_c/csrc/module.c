/* module.c — the thunder_c._C module: initialization, dtype objects, errors, op namespaces.
 *
 * At import it looks up what it needs from torch once (torch.Tensor, the DLPack entry points, the
 * torch dtype objects, the autocast state queries), makes one thunder_c dtype object per dtype of the
 * core (thunder_c.float32, ..., float8_e4m3fn), and builds the `prims` and `torch` namespaces: one
 * callable per op of the core's op table, usable inside jitted code (thunder_c.prims.linear). A
 * core status becomes the Python exception PyTorch would raise, with the core's one-line message. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pyth.h"

pyth_torch pyth_T;
PyObject *pyth_dtypes[TH_DTYPE_COUNT];

/* ---- errors ---------------------------------------------------------------------------------------- */

PyObject *pyth_raise(th_status st) {
  if (pyth_extend_restore_error()) return NULL; /* a Python callback's own exception */
  PyObject *exc;
  switch (st) {
    case TH_ERR_VALUE: exc = PyExc_ValueError; break;
    case TH_ERR_TYPE: exc = PyExc_TypeError; break;
    case TH_ERR_INDEX: exc = PyExc_IndexError; break;
    case TH_ERR_NOT_IMPLEMENTED: exc = PyExc_NotImplementedError; break;
    case TH_ERR_SYNTAX: exc = PyExc_SyntaxError; break;
    case TH_ERR_NOMEM: exc = PyExc_MemoryError; break;
    case TH_ERR_IO: exc = PyExc_OSError; break;
    default: exc = PyExc_RuntimeError; break; /* RUNTIME, VERIFY, DEVICE */
  }
  const char *msg = th_last_error();
  PyErr_SetString(exc, msg && *msg ? msg : th_status_name(st));
  return NULL;
}

/* ---- dtypes --------------------------------------------------------------------------------------- */

typedef struct {
  PyObject_HEAD th_dtype dtype;
} pyth_dtype_obj;

static PyObject *dtype_repr(PyObject *o) {
  return PyUnicode_FromFormat("thunder_c.%s", th_dtype_name(((pyth_dtype_obj *)o)->dtype));
}

static PyObject *dtype_richcompare(PyObject *a, PyObject *b, int op) {
  th_dtype x, y;
  if ((op != Py_EQ && op != Py_NE) || !pyth_dtype_from(a, &x) || !pyth_dtype_from(b, &y)) Py_RETURN_NOTIMPLEMENTED;
  return PyBool_FromLong((x == y) == (op == Py_EQ));
}

/* Equal objects hash equal: a thunder_c dtype hashes as the torch dtype it equals. */
static Py_hash_t dtype_hash(PyObject *o) {
  PyObject *t = pyth_T.dtypes[((pyth_dtype_obj *)o)->dtype];
  return t ? PyObject_Hash(t) : (Py_hash_t)((pyth_dtype_obj *)o)->dtype + 0x7d41;
}

static PyObject *dtype_name(PyObject *o, void *c) {
  (void)c;
  return PyUnicode_FromString(th_dtype_name(((pyth_dtype_obj *)o)->dtype));
}

static PyObject *dtype_short(PyObject *o, void *c) {
  (void)c;
  return PyUnicode_FromString(th_dtype_short(((pyth_dtype_obj *)o)->dtype));
}

static PyObject *dtype_itemsize(PyObject *o, void *c) {
  (void)c;
  return PyLong_FromSize_t(th_dtype_size(((pyth_dtype_obj *)o)->dtype));
}

static PyObject *dtype_is_fp(PyObject *o, void *c) {
  (void)c;
  return PyBool_FromLong(th_dtype_is_float(((pyth_dtype_obj *)o)->dtype));
}

/* The torch dtype of this thunder_c dtype, or None where the installed torch has none. */
static PyObject *dtype_torch(PyObject *o, void *c) {
  (void)c;
  PyObject *t = pyth_T.dtypes[((pyth_dtype_obj *)o)->dtype];
  return Py_NewRef(t ? t : Py_None);
}

static PyGetSetDef dtype_getset[] = {
  {"name", dtype_name, NULL, "the dtype's name (float32)", NULL},
  {"shortname", dtype_short, NULL, "the short name printed in traces (f32)", NULL},
  {"itemsize", dtype_itemsize, NULL, "bytes per element", NULL},
  {"is_floating_point", dtype_is_fp, NULL, "a floating-point dtype (fp8 included)", NULL},
  {"torch", dtype_torch, NULL, "the matching torch.dtype, or None if this torch has none", NULL},
  {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject pyth_dtype_type = {
  PyVarObject_HEAD_INIT(NULL, 0).tp_name = "thunder_c.dtype",
  .tp_basicsize = sizeof(pyth_dtype_obj),
  .tp_repr = dtype_repr,
  .tp_richcompare = dtype_richcompare,
  .tp_hash = dtype_hash,
  .tp_getset = dtype_getset,
  .tp_flags = Py_TPFLAGS_DEFAULT,
  .tp_doc = "A thunder_c dtype (thunder_c.float32, thunder_c.bfloat16, thunder_c.float8_e4m3fn, ...). "
            "Equal to the matching torch.dtype.",
};

bool pyth_dtype_from(PyObject *o, th_dtype *out) {
  if (Py_TYPE(o) == &pyth_dtype_type) return *out = ((pyth_dtype_obj *)o)->dtype, true;
  if (pyth_T.dtype_type && Py_TYPE(o) == (PyTypeObject *)pyth_T.dtype_type)
    for (int i = 0; i < TH_DTYPE_COUNT; i++)
      if (pyth_T.dtypes[i] == o) return *out = (th_dtype)i, true;
  return false;
}

/* ---- devices -------------------------------------------------------------------------------------- */

bool pyth_device_from(PyObject *o, th_device *out) {
  PyObject *s = NULL;
  if (PyUnicode_Check(o))
    s = Py_NewRef(o);
  else if (pyth_T.device_type && PyObject_TypeCheck(o, (PyTypeObject *)pyth_T.device_type))
    s = PyObject_Str(o);
  if (!s) return PyErr_Clear(), false;
  const char *c = PyUnicode_AsUTF8(s);
  bool ok = c && th_device_parse(c, out);
  Py_DECREF(s);
  PyErr_Clear();
  return ok;
}

PyObject *pyth_device_to_torch(th_device d) {
  if (d.type == TH_CPU) return Py_NewRef(pyth_T.cpu_device);
  char buf[32];
  th_device_str(d, buf, sizeof buf);
  return PyObject_CallFunction(pyth_T.device_type, "s", buf);
}

/* Per tensor class met by pyth_tensor_check_class: Py_None (read as a plain tensor) or the name of the
 * hook it overrides (str). torch.Tensor and nn.Parameter never get here. */
static PyObject *class_verdicts, *parameter_type;

int pyth_tensor_check_class(PyObject *t, const char *what) {
  PyTypeObject *tp = Py_TYPE(t);
  if ((PyObject *)tp == pyth_T.tensor_type || ((PyObject *)tp == parameter_type && parameter_type)) return 0;
  if (!parameter_type) {
    PyObject *nn = PyImport_ImportModule("torch.nn");
    parameter_type = nn ? PyObject_GetAttrString(nn, "Parameter") : NULL;
    Py_XDECREF(nn);
    if (!parameter_type) return -1;
    if ((PyObject *)tp == parameter_type) return 0;
  }
  if (!class_verdicts && !(class_verdicts = PyDict_New())) return -1;
  PyObject *v = PyDict_GetItemWithError(class_verdicts, (PyObject *)tp);
  if (!v) {
    if (PyErr_Occurred()) return -1;
    /* what a plain subclass inherits: nn.Parameter's hooks below it, else torch.Tensor's */
    PyTypeObject *base = PyType_IsSubtype(tp, (PyTypeObject *)parameter_type) ? (PyTypeObject *)parameter_type
                                                                              : (PyTypeObject *)pyth_T.tensor_type;
    static const char *const hooks[] = {"__torch_dispatch__", "__torch_function__", "__tensor_flatten__"};
    v = Py_None;
    for (int i = 0; i < 3 && v == Py_None; i++) {
      PyObject *name = PyUnicode_InternFromString(hooks[i]);
      if (!name) return -1;
      if (_PyType_Lookup(tp, name) != _PyType_Lookup(base, name))
        v = name;
      else
        Py_DECREF(name);
    }
    int rc = PyDict_SetItem(class_verdicts, (PyObject *)tp, v);
    if (v != Py_None) Py_DECREF(v); /* the dict holds it */
    if (rc < 0) return -1;
  }
  if (v == Py_None) return 0;
  PyObject *mod = PyObject_GetAttrString((PyObject *)tp, "__module__");
  PyObject *qn = mod ? PyObject_GetAttrString((PyObject *)tp, "__qualname__") : NULL;
  const char *ms = mod && PyUnicode_Check(mod) ? PyUnicode_AsUTF8(mod) : NULL;
  const char *qs = qn && PyUnicode_Check(qn) ? PyUnicode_AsUTF8(qn) : NULL;
  PyErr_Clear();
  PyErr_Format(PyExc_NotImplementedError,
               "thunder_c: %s is a %s%s%s, a tensor subclass (it defines %U) that thunder_c cannot flatten: it traces "
               "plain tensors only%s",
               what, ms ? ms : "", ms ? "." : "", qs ? qs : _PyType_Name(tp), v,
               ms && !strncmp(ms, "torchao.float8", 14)
                 ? " (torchao's float8 training is traced through the Float8Linear modules of a jitted nn.Module)"
                 : "");
  Py_XDECREF(qn);
  Py_XDECREF(mod);
  return -1;
}

/* ---- module functions ----------------------------------------------------------------------------- */

static PyObject *m_trace_from_text(PyObject *self, PyObject *args, PyObject *kw) {
  (void)self;
  static char *kwl[] = {"text", "filename", NULL};
  const char *text, *filename = "<trace>";
  if (!PyArg_ParseTupleAndKeywords(args, kw, "s|s:trace_from_text", kwl, &text, &filename)) return NULL;
  th_trace *tr = NULL;
  th_status st = th_trace_parse(text, filename, &tr);
  if (st != TH_OK) return pyth_raise(st);
  if ((st = th_trace_verify(tr)) != TH_OK) {
    th_trace_free(tr);
    return pyth_raise(st);
  }
  PyObject *owner = pyth_trace_owner_new(tr);
  if (!owner) return NULL;
  PyObject *r = pyth_trace_wrap(tr, owner);
  Py_DECREF(owner);
  return r;
}

static PyObject *m_torch_function(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  return pyth_torch_function(self, args, nargs);
}

static PyObject *m_is_tracing(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  return PyBool_FromLong(pyth_active != NULL);
}

/* set_num_threads(n) / get_num_threads(): th_set_num_threads / th_get_num_threads (thunder/jit.h). */
static PyObject *m_set_num_threads(PyObject *self, PyObject *arg) {
  (void)self;
  if (PyBool_Check(arg) || !PyIndex_Check(arg))
    return PyErr_Format(PyExc_TypeError, "set_num_threads: n: expected an int, but got %s", Py_TYPE(arg)->tp_name);
  PyObject *i = PyNumber_Index(arg); /* numpy integers too */
  if (!i) return NULL;
  int overflow = 0;
  long n = PyLong_AsLongAndOverflow(i, &overflow);
  if (n == -1 && PyErr_Occurred()) {
    Py_DECREF(i);
    return NULL;
  }
  PyObject *r = NULL;
  if (overflow || n < 0 || n > 4096)
    PyErr_Format(PyExc_ValueError, "set_num_threads: n: expected 0 (the default) or a count in [1, 4096], but got %S",
                 i);
  else if (th_set_num_threads((int)n) != TH_OK)
    pyth_raise(th_last_status());
  else
    r = Py_NewRef(Py_None);
  Py_DECREF(i);
  return r;
}

static PyObject *m_get_num_threads(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  return PyLong_FromLong(th_get_num_threads());
}

/* ops() -> list of (qualname, aliases, schema, in_place) of the core's op table, sorted by qualname: the
 * op ids are internal (their order follows the rows of src/ops/ops.def and may change), so the listing
 * does not show it. */
static int cmp_op_qualname(const void *pa, const void *pb) {
  return strcmp(th_op_qualname(*(const int *)pa), th_op_qualname(*(const int *)pb));
}

static PyObject *m_ops(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  int n = th_op_count();
  int *order = PyMem_Malloc(sizeof *order * (size_t)(n > 0 ? n : 1));
  if (!order) return PyErr_NoMemory();
  for (int i = 0; i < n; i++) order[i] = i;
  qsort(order, (size_t)n, sizeof *order, cmp_op_qualname);
  PyObject *l = PyList_New(0);
  for (int k = 0; l && k < n; k++) {
    int i = order[k];
    PyObject *t = Py_BuildValue("(sssO)", th_op_qualname(i), th_op_aliases(i), th_op_schema(i),
                                (th_op_flags(i) & TH_OPF_IN_PLACE) ? Py_True : Py_False);
    if (!t || PyList_Append(l, t) < 0) Py_CLEAR(l);
    Py_XDECREF(t);
  }
  PyMem_Free(order);
  return l;
}

/* op_rows() -> one dict per row of the elementwise op tables src/ops/unary.def and src/ops/binary.def
 * (the rows themselves, expanded here: the frontend may read the core's sources), sorted by name:
 *   name     the op's name ("add"): its torch-level op is ltorch.<name>
 *   arity    1 (unary.def) or 2 (binary.def)
 *   kind     the prim's kind: unary MATH FLOAT EXACT PRED, binary MATH FLOAT ALL EXACT CMP; None for a
 *            composite (a torch-level op without a prim of its own: TH_UNARY_TORCH / TH_BINARY_TORCH)
 *   prim     "prims.<name>", or None for a composite
 *   torch    "ltorch.<name>"
 *   inplace  "ltorch.<name>_", or None for a row without an in-place variant (NO_INPLACE)
 *   fold     how numbers fold ("FLOAT", "ARITH", ...), None for a composite
 *   decomp   the torch-level op's decomposition: a promotion kind ("DEFAULT", "INT_TO_FLOAT", ...) or
 *            "OWN" (written by hand; always for a composite)
 *   fuse     whether the prim has a fuser template (False: TH_UF_NO_FUSE / TH_BF_NO_FUSE), None for a
 *            composite
 * Tests walk these rows (by kind, by in-place variant) instead of keeping lists of op names. */
typedef struct op_row {
  const char *name, *kind, *fold, *decomp;
  int arity;
  bool inplace, fuse;
} op_row;

#define OPROW_INPLACE_INPLACE true
#define OPROW_INPLACE_NO_INPLACE false
static const op_row op_rows_table[] = {
#define TH_UNARY(name, kind, cexpr, f32, f64, i64, fold, flags, decomp, params, tags, aliases, inplace, ip_aliases)    \
  {#name, #kind, #fold, #decomp, 1, OPROW_INPLACE_##inplace, !((flags)&TH_UF_NO_FUSE)},
#define TH_UNARY_TORCH(name, params, tags, aliases, inplace, ip_aliases)                                               \
  {#name, NULL, NULL, "OWN", 1, OPROW_INPLACE_##inplace, false},
#include "ops/unary.def"
#undef TH_UNARY
#undef TH_UNARY_TORCH
#define TH_BINARY(name, kind, cexpr, f32, f64, i64, fold, flags, decomp, input, params, tags, aliases, inplace,        \
                  ip_aliases)                                                                                          \
  {#name, #kind, #fold, #decomp, 2, OPROW_INPLACE_##inplace, !((flags)&TH_BF_NO_FUSE)},
#define TH_BINARY_TORCH(name, input, params, tags, aliases, inplace, ip_aliases)                                       \
  {#name, NULL, NULL, "OWN", 2, OPROW_INPLACE_##inplace, false},
#include "ops/binary.def"
#undef TH_BINARY
#undef TH_BINARY_TORCH
};
#undef OPROW_INPLACE_INPLACE
#undef OPROW_INPLACE_NO_INPLACE
#define N_OP_ROWS ((int)(sizeof op_rows_table / sizeof op_rows_table[0]))

static int cmp_op_row(const void *pa, const void *pb) {
  return strcmp((*(const op_row *const *)pa)->name, (*(const op_row *const *)pb)->name);
}

static PyObject *str_or_none(const char *fmt, const char *name, bool present) {
  return present ? PyUnicode_FromFormat(fmt, name) : Py_NewRef(Py_None);
}

static PyObject *op_row_dict(const op_row *r) {
  bool prim = r->kind != NULL;
  PyObject *d = PyDict_New();
  if (!d) return NULL;
  struct {
    const char *key;
    PyObject *v;
  } items[] = {
    {"name", PyUnicode_FromString(r->name)},
    {"arity", PyLong_FromLong(r->arity)},
    {"kind", str_or_none("%s", r->kind, prim)},
    {"prim", str_or_none("prims.%s", r->name, prim)},
    {"torch", PyUnicode_FromFormat("ltorch.%s", r->name)},
    {"inplace", str_or_none("ltorch.%s_", r->name, r->inplace)},
    {"fold", str_or_none("%s", r->fold, prim)},
    {"decomp", PyUnicode_FromString(r->decomp)},
    {"fuse", prim ? PyBool_FromLong(r->fuse) : Py_NewRef(Py_None)},
  };
  bool ok = true;
  for (size_t i = 0; i < sizeof items / sizeof items[0]; i++) {
    if (ok && (!items[i].v || PyDict_SetItemString(d, items[i].key, items[i].v) < 0)) ok = false;
    Py_XDECREF(items[i].v);
  }
  if (!ok) Py_CLEAR(d);
  return d;
}

static PyObject *m_op_rows(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  const op_row *sorted[N_OP_ROWS];
  for (int i = 0; i < N_OP_ROWS; i++) sorted[i] = &op_rows_table[i];
  qsort(sorted, (size_t)N_OP_ROWS, sizeof sorted[0], cmp_op_row);
  PyObject *l = PyList_New(0);
  for (int i = 0; l && i < N_OP_ROWS; i++) {
    PyObject *d = op_row_dict(sorted[i]);
    if (!d || PyList_Append(l, d) < 0) Py_CLEAR(l);
    Py_XDECREF(d);
  }
  return l;
}

static PyMethodDef module_methods[] = {
  {"trace_from_text", (PyCFunction)(void (*)(void))m_trace_from_text, METH_VARARGS | METH_KEYWORDS,
   "trace_from_text(text, filename='<trace>') -> Trace\n\nParses a trace in Thunder's printed format "
   "(the C parser) and verifies it. Raises SyntaxError with line:col and a caret on bad text, "
   "RuntimeError when the recorded shapes/dtypes disagree with the ops."},
  {"torch_function", (PyCFunction)(void (*)(void))m_torch_function, METH_FASTCALL,
   "torch_function(func, types, args, kwargs): records a torch call on proxies (used by the mode)."},
  {"is_tracing", m_is_tracing, METH_NOARGS, "True while thunder_c.jit traces a function."},
  {"set_num_threads", m_set_num_threads, METH_O,
   "set_num_threads(n): the OpenMP threads thunder_c's compiled programs run on (fused kernels, eager "
   "kernels, oneDNN GEMMs), independent of torch.set_num_threads; 0 restores the default "
   "(THUNDER_NUM_THREADS, else OMP_NUM_THREADS, else every CPU this process may use). ValueError outside "
   "[0, 4096]."},
  {"get_num_threads", m_get_num_threads, METH_NOARGS,
   "get_num_threads() -> int: the thread count compiled programs run on (see set_num_threads)."},
  {"ops", m_ops, METH_NOARGS,
   "The core's op table: a list of (qualname, aliases, schema, in_place), sorted by qualname."},
  {"op_rows", m_op_rows, METH_NOARGS,
   "The rows of the elementwise op tables (src/ops/unary.def, binary.def), sorted by name: one dict each "
   "with name, arity (1 or 2), kind (the prim's: MATH FLOAT EXACT PRED ALL CMP; None for a composite), "
   "prim, torch and inplace (qualnames, None where absent), fold, decomp and fuse."},
  {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
  PyModuleDef_HEAD_INIT,
  "thunder_c._C",
  "The C core of thunder_c: tracer, proxies, jitted callables, traces.",
  -1,
  module_methods,
  NULL,
  NULL,
  NULL,
  NULL,
};

/* ---- namespaces: thunder_c.prims / thunder_c.torch ------------------------------------------------- */

static int add_namespaces(PyObject *m) {
  PyObject *prims = PyModule_New("thunder_c.prims"), *ltorch = PyModule_New("thunder_c.torch");
  if (!prims || !ltorch) goto fail;
  for (int i = 0; i < th_op_count(); i++) {
    const char *q = th_op_qualname(i);
    const char *dot = strchr(q, '.');
    if (th_op_flags(i) & TH_OPF_UTILITY) continue;
    bool is_prim = th_op_flags(i) & TH_OPF_PRIM;
    char display[128];
    snprintf(display, sizeof display, "thunder_c.%s.%s", is_prim ? "prims" : "torch", dot + 1);
    PyObject *op = pyth_op_new(q, display, th_op_flags(i), false, NULL);
    if (!op) goto fail;
    int r = PyModule_AddObject(is_prim ? prims : ltorch, dot + 1, op);
    if (r < 0) {
      Py_DECREF(op);
      goto fail;
    }
  }
  if (PyModule_AddObject(m, "prims", prims) < 0) goto fail;
  prims = NULL;
  if (PyModule_AddObject(m, "torch", ltorch) < 0) goto fail;
  return 0;
fail:
  Py_XDECREF(prims);
  Py_XDECREF(ltorch);
  return -1;
}

/* ---- init ------------------------------------------------------------------------------------------ */

PyObject *pyth_torch_for_device(const char *name, const char *device_type) {
  PyObject *functools = PyImport_ImportModule("functools");
  PyObject *partial = functools ? PyObject_GetAttrString(functools, "partial") : NULL;
  PyObject *f = partial ? PyObject_GetAttrString(pyth_T.torch, name) : NULL;
  PyObject *r = f ? PyObject_CallFunction(partial, "Os", f, device_type) : NULL;
  Py_XDECREF(functools);
  Py_XDECREF(partial);
  Py_XDECREF(f);
  return r;
}

/* The tensor proxies lend torch's C code (pyth_proxy's comment): a 1-element meta tensor, and the
 * three payload words that make a proxy read as it. The layout is read off this tensor and a second
 * one: a plain at::Tensor when the first word is a TensorImpl pointer that differs between the two
 * and the two hook words after it are NULL; a MaybeOwned when the first word is an owned
 * (isBorrowed_ == 0, padding zero) flag and the second word holds differing pointers. On any other
 * layout the words stay zero (a proxy then reads as an undefined tensor). */
static int init_stand_in(void) {
  PyObject *empty = PyObject_GetAttrString(pyth_T.torch, "empty");
  PyObject *kw = Py_BuildValue("{s:s}", "device", "meta");
  PyObject *one = PyLong_FromLong(1);
  PyObject *args = one ? PyTuple_Pack(1, one) : NULL;
  PyObject *a = empty && kw && args ? PyObject_Call(empty, args, kw) : NULL;
  PyObject *b = a ? PyObject_Call(empty, args, kw) : NULL;
  Py_XDECREF(empty);
  Py_XDECREF(kw);
  Py_XDECREF(one);
  Py_XDECREF(args);
  if (!a || !b) {
    Py_XDECREF(a);
    return -1;
  }
  const size_t off = offsetof(pyth_proxy, torch_payload);
  memset(pyth_T.stand_in_words, 0, sizeof pyth_T.stand_in_words);
  if (off == sizeof(PyObject) && PyObject_IsInstance(a, pyth_T.tensor_type) == 1 &&
      (size_t)Py_TYPE(a)->tp_basicsize >= off + sizeof pyth_T.stand_in_words) {
    const void *wa[3], *wb[3];
    memcpy(wa, (const char *)a + off, sizeof wa);
    memcpy(wb, (const char *)b + off, sizeof wb);
    if (wa[0] && wb[0] && wa[0] != wb[0] && !wa[1] && !wa[2] && !wb[1] && !wb[2]) {
      pyth_T.stand_in_words[0] = wa[0]; /* at::Tensor cdata; no hooks */
    } else if (!wa[0] && !wb[0] && wa[1] && wb[1] && wa[1] != wb[1]) {
      pyth_T.stand_in_words[0] = (const void *)(uintptr_t)1; /* isBorrowed_ = true (little-endian byte 0) */
      pyth_T.stand_in_words[1] = wa[1];
    }
  }
  Py_DECREF(b);
  pyth_T.stand_in = a; /* kept for the process: its TensorImpl is what proxies lend */
  return 0;
}

static int init_torch(void) {
  pyth_T.torch = PyImport_ImportModule("torch");
  if (!pyth_T.torch) return -1;
  PyObject *tc = PyObject_GetAttrString(pyth_T.torch, "_C");
  if (!tc) return -1;
  pyth_T.to_dlpack = PyObject_GetAttrString(tc, "_to_dlpack");
  pyth_T.from_dlpack = PyObject_GetAttrString(tc, "_from_dlpack");
  Py_DECREF(tc);
  pyth_T.tensor_type = PyObject_GetAttrString(pyth_T.torch, "Tensor");
  pyth_T.size_type = PyObject_GetAttrString(pyth_T.torch, "Size");
  pyth_T.device_type = PyObject_GetAttrString(pyth_T.torch, "device");
  pyth_T.dtype_type = PyObject_GetAttrString(pyth_T.torch, "dtype");
  pyth_T.is_autocast_enabled = pyth_torch_for_device("is_autocast_enabled", "cuda");
  pyth_T.is_autocast_cpu_enabled = pyth_torch_for_device("is_autocast_enabled", "cpu");
  pyth_T.get_autocast_gpu_dtype = pyth_torch_for_device("get_autocast_dtype", "cuda");
  pyth_T.get_autocast_cpu_dtype = pyth_torch_for_device("get_autocast_dtype", "cpu");
  pyth_T.is_grad_enabled = PyObject_GetAttrString(pyth_T.torch, "is_grad_enabled");
  pyth_T.get_default_dtype = PyObject_GetAttrString(pyth_T.torch, "get_default_dtype");
  if (!pyth_T.to_dlpack || !pyth_T.from_dlpack || !pyth_T.tensor_type || !pyth_T.size_type || !pyth_T.device_type ||
      !pyth_T.dtype_type || !pyth_T.is_autocast_enabled || !pyth_T.is_autocast_cpu_enabled ||
      !pyth_T.get_autocast_gpu_dtype || !pyth_T.get_autocast_cpu_dtype || !pyth_T.is_grad_enabled ||
      !pyth_T.get_default_dtype)
    return -1;
  pyth_T.cpu_device = PyObject_CallFunction(pyth_T.device_type, "s", "cpu");
  if (!pyth_T.cpu_device) return -1;
  if (init_stand_in() < 0) return -1;
  for (int i = 0; i < TH_DTYPE_COUNT; i++) { /* every dtype of the core is torch's (fp8 since torch 2.1) */
    pyth_T.dtypes[i] = PyObject_GetAttrString(pyth_T.torch, th_dtype_name((th_dtype)i));
    if (!pyth_T.dtypes[i] || Py_TYPE(pyth_T.dtypes[i]) != (PyTypeObject *)pyth_T.dtype_type) {
      Py_CLEAR(pyth_T.dtypes[i]);
      PyErr_Clear();
      PyErr_Format(PyExc_ImportError, "thunder_c: torch has no dtype torch.%s (thunder_c needs torch >= 2.4)",
                   th_dtype_name((th_dtype)i));
      return -1;
    }
  }
  pyth_T.return_types = PyObject_GetAttrString(pyth_T.torch, "return_types");
  PyErr_Clear();
  PyObject *np = PyImport_ImportModule("numpy");
  pyth_T.numpy_ndarray = np ? PyObject_GetAttrString(np, "ndarray") : NULL;
  Py_XDECREF(np);
  PyErr_Clear();
  pyth_T.memory_format_type = PyObject_GetAttrString(pyth_T.torch, "memory_format");
  pyth_T.contiguous_format = PyObject_GetAttrString(pyth_T.torch, "contiguous_format");
  pyth_T.preserve_format = PyObject_GetAttrString(pyth_T.torch, "preserve_format");
  PyErr_Clear();
  PyObject *lc = PyImport_ImportModule("linecache");
  if (lc) {
    pyth_T.linecache_getline = PyObject_GetAttrString(lc, "getline");
    Py_DECREF(lc);
  }
  PyErr_Clear();
  return 0;
}

PyMODINIT_FUNC PyInit__C(void) {
  if (PyType_Ready(&pyth_dtype_type) < 0 || PyType_Ready(&pyth_proxy_type) < 0 || PyType_Ready(&pyth_op_type) < 0 ||
      PyType_Ready(&pyth_trace_type) < 0)
    return NULL;
  if (init_torch() < 0) return NULL;
  PyObject *m = PyModule_Create(&module_def);
  if (!m) return NULL;
  for (int i = 0; i < TH_DTYPE_COUNT; i++) {
    pyth_dtype_obj *d = PyObject_New(pyth_dtype_obj, &pyth_dtype_type);
    if (!d) goto fail;
    d->dtype = (th_dtype)i;
    pyth_dtypes[i] = (PyObject *)d;
    if (PyModule_AddObjectRef(m, th_dtype_name((th_dtype)i), (PyObject *)d) < 0) goto fail;
  }
  pyth_passthrough_marker = PyObject_CallNoArgs((PyObject *)&PyBaseObject_Type);
  if (!pyth_passthrough_marker || PyModule_AddObjectRef(m, "PASSTHROUGH", pyth_passthrough_marker) < 0) goto fail;
  if (PyModule_AddObjectRef(m, "TensorProxy", (PyObject *)&pyth_proxy_type) < 0 ||
      PyModule_AddObjectRef(m, "dtype", (PyObject *)&pyth_dtype_type) < 0 ||
      PyModule_AddObjectRef(m, "Trace", (PyObject *)&pyth_trace_type) < 0 ||
      PyModule_AddObjectRef(m, "Op", (PyObject *)&pyth_op_type) < 0)
    goto fail;
  if (add_namespaces(m) < 0 || pyth_jit_ready(m) < 0 || pyth_transforms_ready(m) < 0 || pyth_extend_ready(m) < 0 ||
      pyth_autograd_ready(m) < 0)
    goto fail;
  return m;
fail:
  Py_DECREF(m);
  return NULL;
}
