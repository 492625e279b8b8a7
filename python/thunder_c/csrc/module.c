/* module.c — the thunder_c._C module: initialization, dtype objects, errors, op namespaces.
 *
 * At import it looks up what it needs from torch once (torch.Tensor, the DLPack entry points, the
 * torch dtype objects, the autocast state queries), makes one thunder_c dtype object per dtype of the
 * core (thunder_c.float32, ..., float8_e4m3fn), and builds the `prims` and `torch` namespaces: one
 * callable per op of the core's op table, usable inside jitted code (thunder_c.prims.linear). A
 * core status becomes the Python exception PyTorch would raise, with the core's one-line message. */
#include <stdint.h>
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
  PyObject_HEAD
  th_dtype dtype;
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
  if (PyUnicode_Check(o)) s = Py_NewRef(o);
  else if (pyth_T.device_type && PyObject_TypeCheck(o, (PyTypeObject *)pyth_T.device_type)) s = PyObject_Str(o);
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
      if (_PyType_Lookup(tp, name) != _PyType_Lookup(base, name)) v = name;
      else Py_DECREF(name);
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

/* ops() -> list of (qualname, aliases, schema) of the core's op table. */
static PyObject *m_ops(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  PyObject *l = PyList_New(0);
  if (!l) return NULL;
  for (int i = 0; i < th_op_count(); i++) {
    PyObject *t = Py_BuildValue("(sssO)", th_op_qualname(i), th_op_aliases(i), th_op_schema(i),
                                (th_op_flags(i) & TH_OPF_IN_PLACE) ? Py_True : Py_False);
    if (!t || PyList_Append(l, t) < 0) {
      Py_XDECREF(t);
      Py_DECREF(l);
      return NULL;
    }
    Py_DECREF(t);
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
    {"ops", m_ops, METH_NOARGS, "The core's op table: a list of (qualname, aliases, schema, in_place)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "thunder_c._C",
    "The C core of thunder_c: tracer, proxies, jitted callables, traces.", -1, module_methods,
    NULL, NULL, NULL, NULL,
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
  if (!pyth_T.to_dlpack || !pyth_T.from_dlpack || !pyth_T.tensor_type || !pyth_T.size_type ||
      !pyth_T.device_type || !pyth_T.dtype_type || !pyth_T.is_autocast_enabled || !pyth_T.is_autocast_cpu_enabled ||
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
