/* dispatch.c — the dispatch table of the tracer: which op of the core each torch callable, Tensor
 * method and operator spelling records (built from ops.def's aliases at the first trace), the callable
 * op objects (thunder_c.prims.add, bound Tensor methods), and pyth_torch_function, the entry point of
 * the TorchFunctionMode subclass and of TensorProxy.__torch_function__. */
#include <string.h>

#include "proxy.h"

static PyObject *dispatch;    /* dict: torch callable -> pyth_op */
PyObject *pyth_methods;       /* dict: Tensor method name -> pyth_op */
static PyObject *passthrough; /* set: torch callables that only read metadata (run eagerly) */
PyObject *pyth_passthrough_marker;

static void op_dealloc(PyObject *o) {
  pyth_op *op = (pyth_op *)o;
  Py_XDECREF(op->qualname);
  Py_XDECREF(op->display);
  Py_XDECREF(op->self);
  PyObject_Free(o);
}

/* Whether a random op's arguments hold a torch.Generator: a jitted function draws from torch's default
 * generator only (its one Philox stream; rng.c). */
static bool holds_generator(PyObject *args, PyObject *kwargs) {
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(args); i++)
    if (!strcmp(Py_TYPE(PyTuple_GET_ITEM(args, i))->tp_name, "torch._C.Generator")) return true;
  Py_ssize_t pos = 0;
  PyObject *k, *v;
  while (kwargs && PyDict_Next(kwargs, &pos, &k, &v))
    if (!strcmp(Py_TYPE(v)->tp_name, "torch._C.Generator")) return true;
  return false;
}

PyObject *pyth_op_call_args(pyth_op *op, PyObject *args, PyObject *kwargs) {
  const char *q = PyUnicode_AsUTF8(op->qualname), *d = PyUnicode_AsUTF8(op->display);
  if (!q || !d) return NULL;
  if ((op->flags & TH_OPF_RANDOM) && holds_generator(args, kwargs))
    return PyErr_Format(PyExc_NotImplementedError,
                        "%s with a generator is not supported by thunder_c: a jitted function draws from torch's "
                        "default generator (pass generator=None and seed with torch.manual_seed)",
                        d);
  Py_ssize_t n = PyTuple_GET_SIZE(args);
  if (!op->swap || n < 2) return pyth_record(q, d, op->flags, args, kwargs);
  PyObject *sw = PyTuple_New(n);
  if (!sw) return NULL;
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *x = PyTuple_GET_ITEM(args, i == 0 ? 1 : i == 1 ? 0 : i);
    PyTuple_SET_ITEM(sw, i, Py_NewRef(x));
  }
  PyObject *r = pyth_record(q, d, op->flags, sw, kwargs);
  Py_DECREF(sw);
  return r;
}

static PyObject *op_call(PyObject *o, PyObject *args, PyObject *kwargs) {
  pyth_op *op = (pyth_op *)o;
  if (!op->self) return pyth_op_call_args(op, args, kwargs);
  Py_ssize_t n = PyTuple_GET_SIZE(args);
  PyObject *full = PyTuple_New(n + 1);
  if (!full) return NULL;
  PyTuple_SET_ITEM(full, 0, Py_NewRef(op->self));
  for (Py_ssize_t i = 0; i < n; i++) PyTuple_SET_ITEM(full, i + 1, Py_NewRef(PyTuple_GET_ITEM(args, i)));
  PyObject *r = pyth_op_call_args(op, full, kwargs);
  Py_DECREF(full);
  return r;
}

static PyObject *op_repr(PyObject *o) {
  pyth_op *op = (pyth_op *)o;
  return PyUnicode_FromFormat("<thunder_c op %U (%U)>", op->display, op->qualname);
}

PyTypeObject pyth_op_type = {
  PyVarObject_HEAD_INIT(NULL, 0).tp_name = "thunder_c.Op",
  .tp_basicsize = sizeof(pyth_op),
  .tp_dealloc = op_dealloc,
  .tp_call = op_call,
  .tp_repr = op_repr,
  .tp_flags = Py_TPFLAGS_DEFAULT,
  .tp_doc = "An op of thunder-c, callable inside a function compiled with thunder_c.jit.",
};

PyObject *pyth_op_new(const char *qualname, const char *display, unsigned flags, bool swap, PyObject *self) {
  pyth_op *op = PyObject_New(pyth_op, &pyth_op_type);
  if (!op) return NULL;
  op->qualname = PyUnicode_FromString(qualname);
  op->display = PyUnicode_FromString(display);
  op->flags = flags;
  op->swap = swap;
  op->self = Py_XNewRef(self);
  if (!op->qualname || !op->display) return Py_DECREF(op), NULL;
  return (PyObject *)op;
}

/* getattr chain from `root` ("nn.functional.linear"); NULL without an exception if missing. */
static PyObject *resolve(PyObject *root, const char *path) {
  PyObject *cur = Py_NewRef(root);
  char part[128];
  while (*path) {
    const char *dot = strchr(path, '.');
    size_t n = dot ? (size_t)(dot - path) : strlen(path);
    if (n >= sizeof part) return Py_DECREF(cur), NULL;
    memcpy(part, path, n);
    part[n] = 0;
    PyObject *next = PyObject_GetAttrString(cur, part);
    Py_DECREF(cur);
    if (!next) return PyErr_Clear(), NULL;
    cur = next;
    path = dot ? dot + 1 : path + n;
  }
  return cur;
}

static int add_entry(PyObject *func, const char *qualname, const char *display, unsigned flags, bool swap) {
  if (PyDict_Contains(dispatch, func)) return 0; /* first spelling wins */
  PyObject *op = pyth_op_new(qualname, display, flags, swap, NULL);
  if (!op) return -1;
  int r = PyDict_SetItem(dispatch, func, op);
  Py_DECREF(op);
  return r;
}

/* Maps one spelling ("torch.add", "Tensor.add", "torch.Tensor.__add__") to op `qualname`. */
static int add_alias(const char *alias, const char *qualname, unsigned flags, bool swap) {
  const char *method = NULL;
  PyObject *func = NULL;
  char display[160];
  if (!strncmp(alias, "Tensor.", 7))
    method = alias + 7;
  else if (!strncmp(alias, "torch.Tensor.", 13))
    method = alias + 13;
  if (method) {
    func = resolve(pyth_T.tensor_type, method);
    snprintf(display, sizeof display, "torch.Tensor.%s", method);
  } else if (!strncmp(alias, "torch.", 6)) {
    func = resolve(pyth_T.torch, alias + 6);
    snprintf(display, sizeof display, "%s", alias);
  } else {
    return 0;
  }
  int r = 0;
  if (func) r = add_entry(func, qualname, display, flags, swap);
  Py_XDECREF(func);
  if (r == 0 && method && !PyDict_GetItemString(pyth_methods, method)) {
    PyObject *op = pyth_op_new(qualname, display, flags, swap, NULL);
    if (!op) return -1;
    r = PyDict_SetItemString(pyth_methods, method, op);
    Py_DECREF(op);
  }
  return r;
}

/* Python protocol spellings the op table does not list: reflected operators (swapped operands)
 * and a few forward operators. */
static const struct {
  const char *method, *qualname;
  bool swap;
} protocol[] = {
  {"__radd__", "ltorch.add", true},         {"__rsub__", "ltorch.sub", true},
  {"__rmul__", "ltorch.mul", true},         {"__rtruediv__", "ltorch.true_divide", true},
  {"__rdiv__", "ltorch.true_divide", true}, {"__rpow__", "ltorch.pow", true},
  {"__rmatmul__", "ltorch.matmul", true},   {"__rfloordiv__", "ltorch.floor_divide", true},
  {"__rmod__", "ltorch.remainder", true},   {"__rand__", "ltorch.bitwise_and", true},
  {"__ror__", "ltorch.bitwise_or", true},   {"__rxor__", "ltorch.bitwise_xor", true},
  {"__matmul__", "ltorch.matmul", false},   {"__truediv__", "ltorch.true_divide", false},
  {"__div__", "ltorch.true_divide", false}, {"__abs__", "ltorch.abs", false},
  {"__getitem__", "ltorch.getitem", false}, {"__and__", "ltorch.bitwise_and", false},
  {"where", "ltorch.where", true}, /* x.where(condition, y) is torch.where(condition, x, y) */
};

/* Tensor attributes that only read metadata: on a real (captured) tensor they run eagerly. */
static const char *const metadata_reads[] = {
  "shape",
  "dtype",
  "device",
  "ndim",
  "requires_grad",
  "is_cuda",
  "is_cpu",
  "layout",
  "is_leaf",
  "size",
  "dim",
  "ndimension",
  "numel",
  "nelement",
  "stride",
  "is_floating_point",
  "is_complex",
  "is_contiguous",
  "element_size",
  "__len__",
  "__repr__",
  "__format__",
  "__hash__",
  "grad_fn",
  "data",
  "detach",
  "storage_offset",
};

/* torch functions that build a tensor from Python data: run eagerly while tracing (no proxy among
 * their arguments); the tensor they make is then captured as a constant input like a closure tensor. */
static const char *const data_constructors[] = {"tensor", "as_tensor", "from_numpy", "scalar_tensor"};

/* torch callables of Python-side state that torch 2.x routes through the TorchFunctionMode: run
 * eagerly while tracing (no proxy among their arguments). `torch.no_grad()` sets grad mode through
 * torch._C._set_grad_enabled, which the recording then reads (grad_stops); torch.device(...) makes a
 * device object; torch._assert(cond, msg) with a Python bool (a shape comparison) is a no-op or raises
 * AssertionError(msg) at trace time, as in eager (a tensor condition is data-dependent: refused below).
 * Dotted paths below `torch`. */
static const char *const state_functions[] = {"device", "_C._set_grad_enabled", "_assert"};

/* Metadata queries in function form (torch.numel(x)): answered by the proxy's method of that name. */
static const struct {
  const char *func, *method;
} metadata_functions[] = {
  {"numel", "numel"},
  {"is_floating_point", "is_floating_point"},
  {"is_complex", "is_complex"},
  {"is_nonzero", "item"}, /* data-dependent: raises as item() does */
};
static PyObject *metadata_funcs; /* dict: torch function -> method name */

int pyth_qualname_flags(const char *qualname, unsigned *flags) {
  for (int i = 0; i < th_op_count(); i++)
    if (!strcmp(th_op_qualname(i), qualname)) return *flags = th_op_flags(i), 1;
  return 0;
}

int pyth_dispatch_init(void) {
  if (dispatch) return 0;
  if (!(dispatch = PyDict_New()) || !(pyth_methods = PyDict_New()) || !(passthrough = PySet_New(NULL))) goto fail;
  /* the protocol spellings first (the first spelling wins): a reflected operator the op table also
   * names (Tensor.__rpow__ is ltorch.rpow, for traces and coverage) keeps its swapped binary op */
  for (size_t i = 0; i < sizeof protocol / sizeof *protocol; i++) {
    unsigned fl;
    char alias[64];
    if (!pyth_qualname_flags(protocol[i].qualname, &fl)) continue;
    snprintf(alias, sizeof alias, "Tensor.%s", protocol[i].method);
    if (add_alias(alias, protocol[i].qualname, fl, protocol[i].swap) < 0) goto fail;
  }
  for (int i = 0; i < th_op_count(); i++) {
    const char *al = th_op_aliases(i), *q = th_op_qualname(i);
    unsigned fl = th_op_flags(i);
    char one[160];
    for (const char *p = al; p && *p;) {
      const char *bar = strchr(p, '|');
      size_t n = bar ? (size_t)(bar - p) : strlen(p);
      if (n < sizeof one) {
        memcpy(one, p, n);
        one[n] = 0;
        if (add_alias(one, q, fl, false) < 0) goto fail;
      }
      p = bar ? bar + 1 : p + n;
    }
  }
  for (size_t i = 0; i < sizeof data_constructors / sizeof *data_constructors; i++) {
    PyObject *f = PyObject_GetAttrString(pyth_T.torch, data_constructors[i]);
    if (!f) {
      PyErr_Clear();
      continue;
    }
    int r = PySet_Add(passthrough, f);
    Py_DECREF(f);
    if (r < 0) goto fail;
  }
  for (size_t i = 0; i < sizeof state_functions / sizeof *state_functions; i++) {
    PyObject *f = Py_NewRef(pyth_T.torch);
    char part[64];
    for (const char *p = state_functions[i]; f && *p;) {
      size_t n = strcspn(p, ".");
      snprintf(part, sizeof part, "%.*s", (int)n, p);
      Py_SETREF(f, PyObject_GetAttrString(f, part));
      p += n + (p[n] == '.');
    }
    if (!f) {
      PyErr_Clear(); /* not in this torch */
      continue;
    }
    int r = PySet_Add(passthrough, f);
    Py_DECREF(f);
    if (r < 0) goto fail;
  }
  if (!(metadata_funcs = PyDict_New())) goto fail;
  for (size_t i = 0; i < sizeof metadata_functions / sizeof *metadata_functions; i++) {
    PyObject *f = PyObject_GetAttrString(pyth_T.torch, metadata_functions[i].func);
    if (!f || !metadata_functions[i].method) {
      Py_XDECREF(f);
      PyErr_Clear();
      continue;
    }
    PyObject *m = PyUnicode_FromString(metadata_functions[i].method);
    int r = m ? PyDict_SetItem(metadata_funcs, f, m) : -1;
    Py_XDECREF(m);
    Py_DECREF(f);
    if (r < 0) goto fail;
  }
  for (size_t i = 0; i < sizeof metadata_reads / sizeof *metadata_reads; i++) {
    PyObject *f = PyObject_GetAttrString(pyth_T.tensor_type, metadata_reads[i]);
    if (!f) {
      PyErr_Clear();
      continue;
    }
    PyObject *g = PyObject_HasAttrString(f, "__get__") && !PyCallable_Check(f) ? PyObject_GetAttrString(f, "__get__")
                                                                               : Py_NewRef(f);
    Py_DECREF(f);
    if (!g || PySet_Add(passthrough, g) < 0) {
      Py_XDECREF(g);
      goto fail;
    }
    Py_DECREF(g);
  }
  return 0;
fail:
  Py_CLEAR(dispatch);
  Py_CLEAR(pyth_methods);
  Py_CLEAR(passthrough);
  return -1;
}

/* "torch.cumsum", "torch.Tensor.cumsum", "torch.nn.functional.foo": how users spell func. */
static PyObject *func_display(PyObject *func) {
  PyObject *qn = PyObject_GetAttrString(func, "__qualname__");
  if (!qn) {
    PyErr_Clear();
    qn = PyObject_GetAttrString(func, "__name__");
  }
  if (!qn) {
    PyErr_Clear();
    return PyObject_Repr(func);
  }
  const char *q = PyUnicode_Check(qn) ? PyUnicode_AsUTF8(qn) : NULL;
  if (q && strstr(q, "<locals>")) {
    /* a wrapper made by a factory (torch's boolean_dispatch gives F.max_pool2d the qualname
     * "boolean_dispatch.<locals>.fn" and the public __name__ "max_pool2d"): name it by __name__ */
    PyObject *nm = PyObject_GetAttrString(func, "__name__");
    if (nm && PyUnicode_Check(nm)) {
      Py_SETREF(qn, nm);
      q = PyUnicode_AsUTF8(qn);
    } else {
      Py_XDECREF(nm);
      PyErr_Clear();
    }
  }
  PyObject *r = NULL;
  if (q && (!strncmp(q, "_TensorBase.", 12) || !strncmp(q, "Tensor.", 7))) {
    r = PyUnicode_FromFormat("torch.Tensor.%s", strchr(q, '.') + 1);
  } else if (q && !strncmp(q, "_VariableFunctionsClass.", 24)) {
    r = PyUnicode_FromFormat("torch.%s", q + 24);
  } else if (q && strstr(q, ".__get__")) {
    r = PyObject_Repr(func);
  } else {
    PyObject *mod = PyObject_GetAttrString(func, "__module__");
    PyErr_Clear();
    const char *m = mod && PyUnicode_Check(mod) ? PyUnicode_AsUTF8(mod) : NULL;
    if (!m || !strcmp(m, "torch._C._VariableFunctions"))
      m = "torch";
    else if (!strcmp(m, "torch._C._nn"))
      m = "torch.nn.functional";
    else if (!strcmp(m, "torch._C._linalg"))
      m = "torch.linalg";
    else if (!strcmp(m, "torch._C._special"))
      m = "torch.special";
    else if (!strcmp(m, "torch._C._fft"))
      m = "torch.fft";
    r = PyUnicode_FromFormat("%s.%s", m, q ? q : "?");
    Py_XDECREF(mod);
  }
  Py_DECREF(qn);
  PyErr_Clear();
  return r;
}

/* A user who calls one of torch's random samplers that thunder_c does not build (those it builds are
 * ops of the table, found first) is told which ones it draws and to pass this one in (proxy.h). */
bool pyth_is_random_factory(const char *name) {
  static const char *const exact[] = {"normal",   "normal_",      "bernoulli",  "bernoulli_", "multinomial", "poisson",
                                      "uniform_", "exponential_", "geometric_", "cauchy_",    "log_normal_"};
  const char *dot = strrchr(name, '.');
  const char *base = dot ? dot + 1 : name;
  if (!strncmp(base, "rand", 4)) return true; /* rand randn randint randperm rand_like random_ ... */
  for (size_t i = 0; i < sizeof exact / sizeof *exact; i++)
    if (!strcmp(base, exact[i])) return true;
  return false;
}

static bool has_proxy(PyObject *o, int depth) {
  if (Py_TYPE(o) == &pyth_proxy_type) return true;
  if (depth > 8) return false;
  if (PyTuple_Check(o) || PyList_Check(o)) {
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(o); i++)
      if (has_proxy(PySequence_Fast_GET_ITEM(o, i), depth + 1)) return true;
  } else if (PyDict_Check(o)) {
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(o, &pos, &k, &v))
      if (has_proxy(v, depth + 1)) return true;
  }
  return false;
}

PyObject *pyth_torch_function(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  (void)self;
  if (nargs < 1 || nargs > 4)
    return PyErr_SetString(PyExc_TypeError, "torch_function(func, types, args, kwargs)"), NULL;
  PyObject *func = args[0];
  PyObject *fargs = nargs > 2 && args[2] != Py_None ? args[2] : NULL;
  PyObject *fkw = nargs > 3 && args[3] != Py_None ? args[3] : NULL;
  if ((fargs && !PyTuple_Check(fargs)) || (fkw && !PyDict_Check(fkw)))
    return PyErr_SetString(PyExc_TypeError, "torch_function: args must be a tuple and kwargs a dict"), NULL;
  if (pyth_dispatch_init() < 0) return NULL;
  /* this thread is not tracing (the mode of another thread's trace, if torch shared it): run as is */
  if (!pyth_active && !has_proxy(fargs ? fargs : Py_None, 0) && !(fkw && has_proxy(fkw, 0)))
    return Py_NewRef(pyth_passthrough_marker);
  PyObject *empty = NULL;
  if (!fargs) fargs = empty = PyTuple_New(0);
  if (!fargs) return NULL;
  PyObject *r = NULL;
  PyObject *op = PyDict_GetItemWithError(dispatch, func);
  PyObject *meta = op || PyErr_Occurred() ? NULL : PyDict_GetItemWithError(metadata_funcs, func);
  if (fkw && PyDict_GetItemString(fkw, "out") && PyDict_GetItemString(fkw, "out") != Py_None) {
    PyObject *d = func_display(func);
    if (d) PyErr_Format(PyExc_NotImplementedError, "%U: out= is not supported by thunder_c (use the result)", d);
    Py_XDECREF(d);
  } else if (op) {
    r = pyth_op_call_args((pyth_op *)op, fargs, fkw);
  } else if (meta && PyTuple_GET_SIZE(fargs) == 1 && Py_TYPE(PyTuple_GET_ITEM(fargs, 0)) == &pyth_proxy_type) {
    r = PyObject_CallMethodNoArgs(PyTuple_GET_ITEM(fargs, 0), meta);
  } else if (!PyErr_Occurred()) {
    int pt = PySet_Contains(passthrough, func);
    if (pt == 1 && !has_proxy(fargs, 0) && !(fkw && has_proxy(fkw, 0))) {
      r = Py_NewRef(pyth_passthrough_marker); /* the mode runs func eagerly */
    } else if (pt >= 0) {
      PyObject *d = func_display(func);
      const char *name = d ? PyUnicode_AsUTF8(d) : NULL;
      if (name && !strcmp(name, "torch._assert"))
        PyErr_Format(PyExc_NotImplementedError,
                     "%U with a tensor condition is not supported by thunder_c: the condition depends on the "
                     "tensor's data, known only at run time (assert on shapes or Python values instead)",
                     d);
      else if (name && pyth_is_random_factory(name))
        PyErr_Format(PyExc_NotImplementedError, "%U is not supported by thunder_c: " PYTH_RANDOM_UNSUPPORTED, d);
      else if (d)
        PyErr_Format(PyExc_NotImplementedError, "%U is not supported by thunder_c", d);
      Py_XDECREF(d);
    }
  }
  Py_XDECREF(empty);
  return r;
}
