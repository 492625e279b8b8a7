/* extend.c — the C half of thunder_c.extend: Python callables behind the core's extension API
 * (thunder/executor.h), as Lightning Thunder's thunder.extend (OperatorExecutor, register_operator,
 * register_implementation, register_autocast_rule) lets Python code add operators and executors.
 *
 * Operators: _ext_register_op registers an op with th_op_register_ex; its user pointer is an ext_op
 * record (kept for the process, as the core keeps the op) holding the Python meta or the qualified
 * name of the op it is `like`, the autocast rule and the parameter names. The meta adapter calls the
 * Python meta with extend.TensorProxy objects (shape, dtype, device) for tensors and Python values
 * for constants; a `like` op's meta records the other op in a scratch trace and reads its outputs.
 *
 * Executors: an ExecutorHandle owns a th_executor; each implementation added is an ext_impl record
 * (the kernel, the checker, the claimed op's parameter names) given as the user pointer of
 * th_executor_add_impl_ex. The kernel adapter hands the Python kernel torch tensors that view the
 * program's buffers (DLPack, no copy) and binds the tensors it returns as the outputs (again without
 * a copy; dtype and shape are checked by th_kernel_set_output). A cache entry pins the handles its
 * program uses (pyth_extend_pin), so records outlive every program that calls them.
 *
 * Errors: a Python exception in a callback is kept (thread-local) while the core unwinds with a
 * message naming it; pyth_raise re-raises that very exception at the jitted call.
 * The GIL: callbacks run inside the call that traces, compiles or runs (the caller's thread, the GIL
 * held); each adapter still takes it with PyGILState_Ensure, which then costs nothing. */
#include <string.h>

#include "pyth.h"

static PyObject *meta_proxy_make; /* extend.TensorProxy._make(name, shape, dtype, device) */

/* ---- a Python exception kept while the core unwinds ------------------------------------------------- */

static _Thread_local PyObject *kept_type, *kept_value, *kept_tb;
static _Thread_local char kept_key[160]; /* the start of the message the core carries */

static void drop_kept(void) {
  Py_CLEAR(kept_type);
  Py_CLEAR(kept_value);
  Py_CLEAR(kept_tb);
  kept_key[0] = 0;
}

/* The current Python exception, raised in `what` ("the kernel of myex for ltorch.gelu"): kept, and
 * turned into a status with the message "<what> raised <Type>: <text>". */
static th_status keep_error(const char *what) {
  PyObject *t, *v, *tb;
  PyErr_Fetch(&t, &v, &tb);
  PyErr_NormalizeException(&t, &v, &tb);
  if (tb && v) PyException_SetTraceback(v, tb);
  th_status st = TH_ERR_RUNTIME;
  if (t && PyErr_GivenExceptionMatches(t, PyExc_ValueError))
    st = TH_ERR_VALUE;
  else if (t && PyErr_GivenExceptionMatches(t, PyExc_TypeError))
    st = TH_ERR_TYPE;
  else if (t && PyErr_GivenExceptionMatches(t, PyExc_IndexError))
    st = TH_ERR_INDEX;
  else if (t && PyErr_GivenExceptionMatches(t, PyExc_NotImplementedError))
    st = TH_ERR_NOT_IMPLEMENTED;
  else if (t && PyErr_GivenExceptionMatches(t, PyExc_MemoryError))
    st = TH_ERR_NOMEM;
  PyObject *s = v ? PyObject_Str(v) : NULL;
  const char *text = s ? PyUnicode_AsUTF8(s) : NULL;
  if (!text) PyErr_Clear();
  char msg[512];
  snprintf(msg, sizeof msg, "%s raised %s: %s", what, t ? ((PyTypeObject *)t)->tp_name : "an exception",
           text ? text : "?");
  Py_XDECREF(s);
  drop_kept();
  kept_type = t;
  kept_value = v;
  kept_tb = tb;
  size_t n = strlen(msg) < sizeof kept_key - 1 ? strlen(msg) : sizeof kept_key - 1;
  memcpy(kept_key, msg, n);
  kept_key[n] = 0;
  return th_set_error(st, "%s", msg);
}

bool pyth_extend_restore_error(void) {
  if (!kept_type) return false;
  const char *last = th_last_error();
  if (kept_key[0] && last && strstr(last, kept_key)) {
    PyErr_Restore(kept_type, kept_value, kept_tb);
    kept_type = kept_value = kept_tb = NULL;
    kept_key[0] = 0;
    return true;
  }
  drop_kept(); /* kept for an error the core did not report: stale */
  return false;
}

/* ---- values for Python callbacks ------------------------------------------------------------------- */

static PyObject *dtype_obj(th_dtype d) {
  PyObject *o = (unsigned)d < TH_DTYPE_COUNT ? (pyth_T.dtypes[d] ? pyth_T.dtypes[d] : pyth_dtypes[d]) : Py_None;
  return Py_NewRef(o);
}

/* A meta-time tensor description (extend.TensorProxy) of tensor proxy v. */
static PyObject *meta_proxy(const th_value *v) {
  int nd = th_value_ndim(v);
  PyObject *shape = PyTuple_New(nd);
  for (int i = 0; shape && i < nd; i++) {
    PyObject *x = PyLong_FromLongLong(th_value_shape(v)[i]);
    if (!x)
      Py_CLEAR(shape);
    else
      PyTuple_SET_ITEM(shape, i, x);
  }
  PyObject *dt = dtype_obj(th_value_dtype(v)), *dev = pyth_device_to_torch(th_value_device(v));
  const char *name = th_value_name(v);
  PyObject *r = shape && dev ? PyObject_CallFunction(meta_proxy_make, "sOOO", name ? name : "", shape, dt, dev) : NULL;
  Py_XDECREF(shape);
  Py_XDECREF(dt);
  Py_XDECREF(dev);
  return r;
}

/* th_arg -> Python for metas, checkers and autocast rules: tensors as extend.TensorProxy. */
static PyObject *arg_to_meta(const th_arg *a) {
  if (a->kind == TH_ARG_VALUE) {
    if (th_value_is_tensor(a->u.value)) return meta_proxy(a->u.value);
    return PyErr_Format(PyExc_NotImplementedError,
                        "thunder_c.extend: the number %s is only known at run time; a Python meta, checker or "
                        "autocast rule sees constants only",
                        th_value_name(a->u.value)),
           NULL;
  }
  if (a->kind == TH_ARG_TUPLE || a->kind == TH_ARG_LIST) {
    PyObject *r = a->kind == TH_ARG_TUPLE ? PyTuple_New(a->u.seq.n) : PyList_New(a->u.seq.n);
    for (int i = 0; r && i < a->u.seq.n; i++) {
      PyObject *x = arg_to_meta(&a->u.seq.items[i]);
      if (!x)
        Py_CLEAR(r);
      else if (a->kind == TH_ARG_TUPLE)
        PyTuple_SET_ITEM(r, i, x);
      else
        PyList_SET_ITEM(r, i, x);
    }
    return r;
  }
  return pyth_from_arg(NULL, a);
}

/* Calls fn with n bound arguments (get(i) makes each) in schema order: the last nkw by keyword
 * (names: every parameter's name), the others positionally; extra: more keywords, or NULL. */
typedef PyObject *(*arg_getter)(void *ctx, int i);

static PyObject *call_bound(PyObject *fn, int n, arg_getter get, void *ctx, PyObject *names, int nkw, PyObject *extra) {
  int npos = n - nkw;
  if (npos < 0 || PyTuple_GET_SIZE(names) != n)
    return PyErr_Format(PyExc_RuntimeError, "thunder_c.extend: the op has %d arguments, but %zd parameter names", n,
                        PyTuple_GET_SIZE(names)),
           NULL;
  PyObject *args = PyTuple_New(npos), *kw = extra ? PyDict_Copy(extra) : PyDict_New();
  if (!args || !kw) goto fail;
  for (int i = 0; i < n; i++) {
    PyObject *x = get(ctx, i);
    if (!x) goto fail;
    if (i < npos) {
      PyTuple_SET_ITEM(args, i, x);
    } else {
      int r = PyDict_SetItem(kw, PyTuple_GET_ITEM(names, i), x);
      Py_DECREF(x);
      if (r < 0) goto fail;
    }
  }
  PyObject *res = PyObject_Call(fn, args, kw);
  Py_DECREF(args);
  Py_DECREF(kw);
  return res;
fail:
  Py_XDECREF(args);
  Py_XDECREF(kw);
  return NULL;
}

static PyObject *get_meta_arg(void *ctx, int i) { return arg_to_meta(&((const th_arg *)ctx)[i]); }

typedef struct {
  const th_bsym *b;
} bsym_ctx;

static PyObject *get_bsym_arg(void *ctx, int i) {
  th_arg a = th_bsym_arg(((bsym_ctx *)ctx)->b, i);
  return arg_to_meta(&a);
}

/* ---- operators ------------------------------------------------------------------------------------- */

typedef struct ext_op {
  char *qualname;
  PyObject *meta;       /* the Python meta, or NULL for a `like` op */
  char *like;           /* the qualified name of the op whose meta it shares, or NULL */
  PyObject *autocast;   /* the Python autocast rule, or NULL (no casts) */
  bool has_rule_hook;   /* registered with the autocast adapter (not a TH_OPF_AUTOCAST_* policy) */
  PyObject *names;      /* tuple: every parameter's name, in schema order */
  int nkw;              /* the last nkw are keyword-only */
  const char **kwnames; /* C strings of the last nkw names (for th_trace_call) */
} ext_op;

static ext_op **ops;
static int nops, capops;

static ext_op *find_op(const char *qualname) {
  for (int i = 0; i < nops; i++)
    if (!strcmp(ops[i]->qualname, qualname)) return ops[i];
  return NULL;
}

/* Reads one output description (extend.TensorProxy, or any object with shape and dtype, optionally
 * device) into m; dev_default when it has no device. */
static th_status read_output(const char *qualname, PyObject *o, th_device dev_default, th_tensor_meta *m) {
  PyObject *shape = PyObject_GetAttrString(o, "shape"), *dt = shape ? PyObject_GetAttrString(o, "dtype") : NULL;
  if (!shape || !dt) {
    Py_XDECREF(shape);
    PyErr_Clear();
    return th_set_error(TH_ERR_TYPE,
                        "%s: its meta returned %s; expected a thunder_c.extend.TensorProxy (or a tuple "
                        "of them)",
                        qualname, Py_TYPE(o)->tp_name);
  }
  th_status st = TH_OK;
  PyObject *seq = PySequence_Fast(shape, "shape");
  if (!seq || !pyth_dtype_from(dt, &m->dtype)) {
    PyErr_Clear();
    st = th_set_error(TH_ERR_TYPE,
                      "%s: its meta returned an output with shape %s and dtype %s; expected a sequence "
                      "of ints and a dtype",
                      qualname, Py_TYPE(shape)->tp_name, Py_TYPE(dt)->tp_name);
  } else if (PySequence_Fast_GET_SIZE(seq) > TH_MAX_DIMS) {
    st = th_set_error(TH_ERR_NOT_IMPLEMENTED, "%s: its meta returned an output with %zd dims; at most %d", qualname,
                      PySequence_Fast_GET_SIZE(seq), TH_MAX_DIMS);
  } else {
    m->ndim = (int)PySequence_Fast_GET_SIZE(seq);
    for (int i = 0; i < m->ndim && st == TH_OK; i++) {
      long long x = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, i));
      if ((x == -1 && PyErr_Occurred()) || x < 0) {
        PyErr_Clear();
        st = th_set_error(TH_ERR_VALUE, "%s: its meta returned a shape whose dim %d is not a size >= 0", qualname, i);
      }
      m->shape[i] = x;
    }
  }
  Py_XDECREF(seq);
  Py_DECREF(shape);
  Py_DECREF(dt);
  if (st != TH_OK) return st;
  m->device = dev_default;
  PyObject *dev = PyObject_GetAttrString(o, "device");
  if (!dev)
    PyErr_Clear();
  else if (dev != Py_None && !pyth_device_from(dev, &m->device))
    st = th_set_error(TH_ERR_TYPE, "%s: its meta returned an output whose device is a %s", qualname,
                      Py_TYPE(dev)->tp_name);
  Py_XDECREF(dev);
  return st;
}

/* The first tensor argument's device (outputs without one get it), else cpu. */
static th_device first_device(const th_arg *args, int nargs) {
  for (int i = 0; i < nargs; i++)
    if (args[i].kind == TH_ARG_VALUE && th_value_is_tensor(args[i].u.value)) return th_value_device(args[i].u.value);
  return (th_device){TH_CPU, 0};
}

/* `like` ops: the other op recorded in a scratch trace on inputs with the same metadata. */
typedef struct {
  th_trace *tr;
  th_arg **blocks;
  int n;
} scratch;

static th_arg *scratch_alloc(scratch *s, int n) {
  th_arg **b = realloc(s->blocks, sizeof *b * (size_t)(s->n + 1));
  if (!b) return NULL;
  s->blocks = b;
  return (s->blocks[s->n++] = calloc((size_t)(n ? n : 1), sizeof(th_arg)));
}

static th_status map_arg(scratch *s, const th_arg *a, th_arg *out) {
  *out = *a;
  if (a->kind == TH_ARG_VALUE) {
    const th_value *v = a->u.value;
    if (!th_value_is_tensor(v))
      return th_set_error(TH_ERR_NOT_IMPLEMENTED, "the number %s is only known at run time", th_value_name(v));
    th_value *nv = th_trace_add_tensor_input(s->tr, NULL, th_value_dtype(v), th_value_device(v), th_value_ndim(v),
                                             th_value_shape(v));
    if (!nv) return th_last_status();
    *out = th_arg_value(nv);
  } else if (a->kind == TH_ARG_TUPLE || a->kind == TH_ARG_LIST || a->kind == TH_ARG_DICT) {
    th_arg *items = scratch_alloc(s, a->u.seq.n);
    if (!items) return th_set_error(TH_ERR_NOMEM, "out of memory");
    for (int i = 0; i < a->u.seq.n; i++) {
      th_status st = map_arg(s, &a->u.seq.items[i], &items[i]);
      if (st != TH_OK) return st;
    }
    out->u.seq.items = items;
  }
  return TH_OK;
}

static th_status like_meta(const ext_op *op, const th_arg *args, int nargs, th_tensor_meta *outputs, int *noutputs) {
  scratch s = {th_trace_new("like_meta"), NULL, 0};
  if (!s.tr) return th_last_status();
  th_status st = TH_OK;
  th_arg *mapped = scratch_alloc(&s, nargs);
  if (!mapped) st = th_set_error(TH_ERR_NOMEM, "out of memory");
  for (int i = 0; i < nargs && st == TH_OK; i++) st = map_arg(&s, &args[i], &mapped[i]);
  th_arg out;
  int npos = nargs - op->nkw;
  if (st == TH_OK) st = th_trace_call(s.tr, op->like, npos, mapped, op->nkw, op->kwnames, mapped + npos, &out);
  if (st == TH_OK) {
    const th_arg *items = out.kind == TH_ARG_VALUE ? &out : out.u.seq.items;
    int n = out.kind == TH_ARG_VALUE ? 1 : out.kind == TH_ARG_TUPLE || out.kind == TH_ARG_LIST ? out.u.seq.n : 0;
    if (*noutputs != TH_META_MAX_OUTPUTS && n != *noutputs)
      st = th_set_error(TH_ERR_VALUE, "%s returns %d tensors, but the op's schema returns %d", op->like, n, *noutputs);
    for (int i = 0; i < n && st == TH_OK && i < TH_META_MAX_OUTPUTS; i++) {
      if (items[i].kind != TH_ARG_VALUE || !th_value_is_tensor(items[i].u.value))
        st = th_set_error(TH_ERR_VALUE, "%s returns something that is not a tensor", op->like);
      else
        outputs[i] = th_tensor_meta_of(items[i].u.value);
    }
    if (st == TH_OK) *noutputs = n;
  }
  for (int i = 0; i < s.n; i++) free(s.blocks[i]);
  free(s.blocks);
  th_trace_free(s.tr);
  return st;
}

static th_status op_meta(const th_arg *args, int nargs, th_tensor_meta *outputs, int *noutputs, void *user) {
  const ext_op *op = user;
  if (op->like) return like_meta(op, args, nargs, outputs, noutputs);
  PyGILState_STATE g = PyGILState_Ensure();
  th_status st = TH_OK;
  PyObject *r = call_bound(op->meta, nargs, get_meta_arg, (void *)args, op->names, op->nkw, NULL);
  if (!r) {
    st = keep_error("its meta");
  } else {
    th_device dev = first_device(args, nargs);
    bool many = PyTuple_Check(r) || PyList_Check(r);
    int want = *noutputs;
    if (!many) {
      if (want != 1 && want != TH_META_MAX_OUTPUTS)
        st = th_set_error(TH_ERR_TYPE, "%s: its meta returned one output; its schema returns %d", op->qualname, want);
      else if ((st = read_output(op->qualname, r, dev, &outputs[0])) == TH_OK)
        *noutputs = 1;
    } else {
      Py_ssize_t n = PySequence_Fast_GET_SIZE(r);
      if (want == TH_META_MAX_OUTPUTS ? n > want : n != want)
        st = th_set_error(TH_ERR_TYPE, "%s: its meta returned %zd outputs; its schema returns %s%d", op->qualname, n,
                          want == TH_META_MAX_OUTPUTS ? "at most " : "", want);
      for (Py_ssize_t i = 0; i < n && st == TH_OK; i++)
        st = read_output(op->qualname, PySequence_Fast_GET_ITEM(r, i), dev, &outputs[i]);
      if (st == TH_OK) *noutputs = (int)n;
    }
    Py_DECREF(r);
  }
  PyGILState_Release(g);
  return st;
}

static th_status op_autocast(const th_arg *args, int nargs, th_dtype dtype, th_device_type device_type,
                             th_dtype *cast_to, void *user) {
  const ext_op *op = user;
  if (!op->autocast) return TH_OK; /* no rule (yet): leave every argument alone */
  PyGILState_STATE g = PyGILState_Ensure();
  th_status st = TH_OK;
  PyObject *extra = PyDict_New(), *d = dtype_obj(dtype);
  PyObject *devtype = PyUnicode_FromString(device_type == TH_CUDA ? "cuda" : "cpu");
  PyObject *r = NULL;
  if (extra && d && devtype && PyDict_SetItemString(extra, "dtype", d) == 0 &&
      PyDict_SetItemString(extra, "device_type", devtype) == 0)
    r = call_bound(op->autocast, nargs, get_meta_arg, (void *)args, op->names, op->nkw, extra);
  Py_XDECREF(extra);
  Py_XDECREF(d);
  Py_XDECREF(devtype);
  if (!r) {
    st = keep_error("its autocast rule");
  } else if (r != Py_None) {
    /* a dict {parameter name: dtype or None}, or one entry per parameter */
    for (int i = 0; i < nargs && st == TH_OK; i++) {
      PyObject *x = NULL;
      if (PyDict_Check(r)) {
        x = PyDict_GetItemWithError(r, PyTuple_GET_ITEM(op->names, i));
        Py_XINCREF(x);
      } else if (PySequence_Check(r) && PySequence_Size(r) == nargs) {
        x = PySequence_GetItem(r, i);
      } else {
        PyErr_Clear();
        st = th_set_error(TH_ERR_TYPE,
                          "%s: its autocast rule returned %s; expected a dict {parameter: dtype} or one "
                          "dtype (or None) per parameter (%d)",
                          op->qualname, Py_TYPE(r)->tp_name, nargs);
        break;
      }
      if (!x && PyErr_Occurred()) {
        st = keep_error("its autocast rule");
      } else if (x && x != Py_None && !pyth_dtype_from(x, &cast_to[i])) {
        st = th_set_error(TH_ERR_TYPE, "%s: its autocast rule gave parameter '%s' a %s; expected a dtype or None",
                          op->qualname, PyUnicode_AsUTF8(PyTuple_GET_ITEM(op->names, i)), Py_TYPE(x)->tp_name);
      }
      Py_XDECREF(x);
    }
    if (st == TH_OK && PyDict_Check(r)) { /* every key must name a parameter */
      Py_ssize_t pos = 0;
      PyObject *k, *v;
      while (st == TH_OK && PyDict_Next(r, &pos, &k, &v)) {
        int found = PySequence_Contains(op->names, k);
        if (found != 1) {
          PyErr_Clear();
          PyObject *kr = PyObject_Repr(k);
          st = th_set_error(TH_ERR_VALUE, "%s: its autocast rule names %s, which is not a parameter", op->qualname,
                            kr ? PyUnicode_AsUTF8(kr) : "?");
          Py_XDECREF(kr);
          PyErr_Clear();
        }
      }
    }
  }
  Py_XDECREF(r);
  PyGILState_Release(g);
  return st;
}

static char *dupstr(const char *s) {
  size_t n = strlen(s) + 1;
  char *r = PyMem_RawMalloc(n);
  if (r) memcpy(r, s, n);
  return r;
}

/* _ext_register_op(qualname, schema, meta, like, names, nkw, tags, autocast) -> Op
 * meta: a callable or None (then like: a qualified name); names: tuple of every parameter's name;
 * nkw: how many of the last ones are keyword-only; tags: TH_OPF_* bits (an AUTOCAST_* policy among
 * them means no Python rule); autocast: a callable rule or None. */
static PyObject *m_register_op(PyObject *self, PyObject *args) {
  (void)self;
  const char *qualname, *schema, *like = NULL;
  PyObject *meta, *names, *rule;
  int nkw;
  unsigned tags;
  if (!PyArg_ParseTuple(args, "ssOzO!iIO:_ext_register_op", &qualname, &schema, &meta, &like, &PyTuple_Type, &names,
                        &nkw, &tags, &rule))
    return NULL;
  if ((meta == Py_None) == (like == NULL))
    return PyErr_SetString(PyExc_ValueError, "register_operator: give either meta= or like="), NULL;
  if (meta != Py_None && !PyCallable_Check(meta))
    return PyErr_Format(PyExc_TypeError, "register_operator: meta must be callable, got %s", Py_TYPE(meta)->tp_name),
           NULL;
  if (rule != Py_None && !PyCallable_Check(rule))
    return PyErr_Format(PyExc_TypeError, "register_operator: the autocast rule must be callable, got %s",
                        Py_TYPE(rule)->tp_name),
           NULL;
  if (nkw < 0 || nkw > PyTuple_GET_SIZE(names))
    return PyErr_SetString(PyExc_ValueError, "register_operator: bad keyword-only count"), NULL;
  const unsigned policies = TH_OPF_AUTOCAST_LOWER | TH_OPF_AUTOCAST_FP32 | TH_OPF_AUTOCAST_PROMOTE;
  if (nops == capops) {
    int cap = capops ? 2 * capops : 16;
    ext_op **n = PyMem_RawRealloc(ops, sizeof *n * (size_t)cap);
    if (!n) return PyErr_NoMemory();
    ops = n;
    capops = cap;
  }
  ext_op *op = PyMem_RawCalloc(1, sizeof *op);
  if (!op) return PyErr_NoMemory();
  op->qualname = dupstr(qualname);
  op->like = like ? dupstr(like) : NULL;
  op->kwnames = PyMem_RawCalloc((size_t)(nkw ? nkw : 1), sizeof(char *));
  op->nkw = nkw;
  Py_ssize_t np = PyTuple_GET_SIZE(names);
  for (int i = 0; op->kwnames && i < nkw; i++) {
    const char *s = PyUnicode_Check(PyTuple_GET_ITEM(names, np - nkw + i))
                      ? PyUnicode_AsUTF8(PyTuple_GET_ITEM(names, np - nkw + i))
                      : NULL;
    if (!s || !(op->kwnames[i] = dupstr(s))) {
      PyErr_Clear();
      PyErr_SetString(PyExc_TypeError, "register_operator: parameter names must be str");
      goto fail;
    }
  }
  if (!op->qualname || (like && !op->like) || !op->kwnames) {
    PyErr_NoMemory();
    goto fail;
  }
  op->has_rule_hook = !(tags & policies);
  th_status st = th_op_register_ex(qualname, schema, op_meta, op->has_rule_hook ? op_autocast : NULL, tags, op);
  if (st != TH_OK) {
    pyth_raise(st);
    goto fail;
  }
  /* registered: the core keeps `op` for the process, and so does this table */
  op->meta = meta == Py_None ? NULL : Py_NewRef(meta);
  op->autocast = rule == Py_None ? NULL : Py_NewRef(rule);
  op->names = Py_NewRef(names);
  ops[nops++] = op;
  return pyth_op_new(qualname, qualname, 0, false, NULL);
fail:
  for (int i = 0; op->kwnames && i < nkw; i++) PyMem_RawFree((void *)op->kwnames[i]);
  PyMem_RawFree((void *)op->kwnames);
  PyMem_RawFree(op->like);
  PyMem_RawFree(op->qualname);
  PyMem_RawFree(op);
  return NULL;
}

/* _ext_set_autocast_rule(qualname, rule): the Python autocast rule of an op registered here. */
static PyObject *m_set_autocast_rule(PyObject *self, PyObject *args) {
  (void)self;
  const char *qualname;
  PyObject *rule;
  if (!PyArg_ParseTuple(args, "sO:_ext_set_autocast_rule", &qualname, &rule)) return NULL;
  ext_op *op = find_op(qualname);
  if (!op)
    return PyErr_Format(PyExc_ValueError,
                        "register_autocast_rule: %s is not an op registered by thunder_c.extend "
                        "(built-in ops have their own rules)",
                        qualname),
           NULL;
  if (!op->has_rule_hook)
    return PyErr_Format(PyExc_ValueError, "register_autocast_rule: %s was registered with an autocast policy",
                        qualname),
           NULL;
  if (rule != Py_None && !PyCallable_Check(rule))
    return PyErr_Format(PyExc_TypeError, "register_autocast_rule: the rule must be callable, got %s",
                        Py_TYPE(rule)->tp_name),
           NULL;
  Py_XSETREF(op->autocast, rule == Py_None ? NULL : Py_NewRef(rule));
  Py_RETURN_NONE;
}

/* ---- executors ------------------------------------------------------------------------------------- */

typedef struct ext_impl {
  PyObject *fn;      /* the kernel: torch tensors in, torch tensors out */
  PyObject *checker; /* or NULL */
  PyObject *names;   /* the claimed op's parameter names */
  int nkw;
  bool is_view;   /* the claimed op may return a view of an input (else an aliasing output is copied) */
  char what[96];  /* "the Python kernel of executor 'myex'" (the core puts the op's name in front) */
  char cwhat[96]; /* "the checker of executor 'myex'" */
} ext_impl;

typedef struct {
  PyObject_HEAD th_executor *ex;
  ext_impl **impls;
  int nimpls, cap;
} ext_exec;

static ext_exec **live; /* every ExecutorHandle alive (found by name for pinning) */
static int nlive, caplive;

/* Kernels run as Thunder's execution trace does (@torch.no_grad, @no_autocast): torch's autocast
 * (cpu and cuda) and grad mode are switched off around each Python kernel and restored after, so the
 * kernel computes in exactly the dtypes the trace records. */
static PyObject *set_autocast_gpu, *set_autocast_cpu, *set_grad; /* torch setters, looked up once */

typedef struct {
  bool gpu, cpu, grad; /* what was on (and is switched back on) */
} torch_modes;

static int modes_off(torch_modes *m) {
  PyObject *const getters[3] = {pyth_T.is_autocast_enabled, pyth_T.is_autocast_cpu_enabled, pyth_T.is_grad_enabled};
  PyObject *const setters[3] = {set_autocast_gpu, set_autocast_cpu, set_grad};
  bool *on[3] = {&m->gpu, &m->cpu, &m->grad};
  for (int i = 0; i < 3; i++) {
    *on[i] = false;
    PyObject *r = PyObject_CallNoArgs(getters[i]);
    if (!r) return -1;
    bool was = r == Py_True;
    Py_DECREF(r);
    if (!was) continue;
    r = PyObject_CallOneArg(setters[i], Py_False);
    if (!r) return -1;
    Py_DECREF(r);
    *on[i] = true;
  }
  return 0;
}

static void modes_restore(const torch_modes *m) {
  PyObject *t, *v, *tb;
  PyErr_Fetch(&t, &v, &tb);
  PyObject *const setters[3] = {set_autocast_gpu, set_autocast_cpu, set_grad};
  const bool on[3] = {m->gpu, m->cpu, m->grad};
  for (int i = 0; i < 3; i++)
    if (on[i]) {
      PyObject *r = PyObject_CallOneArg(setters[i], Py_True);
      if (!r) PyErr_Clear();
      Py_XDECREF(r);
    }
  PyErr_Restore(t, v, tb);
}

/* th_arg -> Python for kernels: tensors as torch tensors viewing the run's buffers. */
typedef struct {
  th_kernel_ctx *k;
} kernel_ctx;

static PyObject *kernel_value(th_tensor *t, const th_arg *a) {
  if (t) return pyth_tensor_to_torch(t);
  return PyErr_Format(PyExc_RuntimeError, "thunder_c.extend: no run-time tensor for %s",
                      a->kind == TH_ARG_VALUE ? th_value_name(a->u.value) : "an argument");
}

static PyObject *get_kernel_arg(void *ctx, int i) {
  th_kernel_ctx *k = ((kernel_ctx *)ctx)->k;
  th_arg a = th_kernel_arg(k, i);
  if (a.kind == TH_ARG_VALUE) {
    if (th_value_is_tensor(a.u.value)) return kernel_value(th_kernel_tensor(k, i), &a);
    double f;
    int64_t iv;
    bool is_float;
    if (!th_kernel_number(k, i, &f, &iv, &is_float))
      return PyErr_Format(PyExc_RuntimeError, "thunder_c.extend: no run-time value for %s", th_value_name(a.u.value));
    if (is_float) return PyFloat_FromDouble(f);
    return th_value_dtype(a.u.value) == TH_BOOL ? PyBool_FromLong(iv != 0) : PyLong_FromLongLong(iv);
  }
  if (a.kind == TH_ARG_TUPLE || a.kind == TH_ARG_LIST) {
    PyObject *r = a.kind == TH_ARG_TUPLE ? PyTuple_New(a.u.seq.n) : PyList_New(a.u.seq.n);
    for (int j = 0; r && j < a.u.seq.n; j++) {
      const th_arg *it = &a.u.seq.items[j];
      PyObject *x;
      if (it->kind == TH_ARG_VALUE && th_value_is_tensor(it->u.value))
        x = kernel_value(th_kernel_tensor_item(k, i, j), it);
      else if (it->kind == TH_ARG_VALUE)
        x = PyErr_Format(PyExc_NotImplementedError, "thunder_c.extend: a list holding the run-time number %s",
                         th_value_name(it->u.value));
      else
        x = pyth_from_arg(NULL, it);
      if (!x)
        Py_CLEAR(r);
      else if (a.kind == TH_ARG_TUPLE)
        PyTuple_SET_ITEM(r, j, x);
      else
        PyList_SET_ITEM(r, j, x);
    }
    return r;
  }
  return pyth_from_arg(NULL, &a);
}

/* The bytes tensor t may touch, [*lo, *hi) (empty for no elements). */
static void byte_span(const th_tensor *t, uintptr_t *lo, uintptr_t *hi) {
  uintptr_t base = (uintptr_t)th_tensor_data(t);
  int64_t mn = 0, mx = 0;
  for (int d = 0; d < th_tensor_ndim(t); d++) {
    int64_t n = th_tensor_shape(t)[d], st = th_tensor_strides(t)[d];
    if (n == 0) {
      *lo = *hi = base;
      return;
    }
    if (st > 0)
      mx += st * (n - 1);
    else
      mn += st * (n - 1);
  }
  size_t es = th_dtype_size(th_tensor_dtype(t));
  *lo = base + (uintptr_t)(mn * (int64_t)es);
  *hi = base + (uintptr_t)((mx + 1) * (int64_t)es);
}

static bool overlap(const th_tensor *a, const th_tensor *b) {
  uintptr_t alo, ahi, blo, bhi;
  byte_span(a, &alo, &ahi);
  byte_span(b, &blo, &bhi);
  return alo < ahi && blo < bhi && alo < bhi && blo < ahi;
}

/* Binds output j to torch tensor o (no copy; a tensor sharing memory with an input is copied unless
 * the op may return views). */
static th_status bind_output(th_kernel_ctx *k, const ext_impl *im, int j, PyObject *o) {
  if (!PyObject_TypeCheck(o, (PyTypeObject *)pyth_T.tensor_type))
    return th_set_error(TH_ERR_TYPE, "%s returned %s for output %d; expected a torch.Tensor", im->what,
                        Py_TYPE(o)->tp_name, j);
  th_tensor *t = pyth_tensor_from_torch(o);
  if (!t) return keep_error(im->what);
  if (!im->is_view)
    for (int i = 0; i < th_kernel_num_args(k); i++) {
      th_tensor *in = th_kernel_tensor(k, i);
      if (in && overlap(in, t)) {
        th_tensor *c = th_tensor_contiguous_copy(t);
        th_tensor_release(t);
        if (!c) return th_last_status();
        t = c;
        break;
      }
    }
  return th_kernel_set_output(k, j, t);
}

static th_status impl_kernel(th_kernel_ctx *k) {
  const ext_impl *im = th_kernel_user(k);
  if (!im || !im->fn) return th_set_error(TH_ERR_RUNTIME, "thunder_c.extend: the kernel's executor is gone");
  PyGILState_STATE g = PyGILState_Ensure();
  th_status st = TH_OK;
  kernel_ctx c = {k};
  torch_modes modes;
  PyObject *r = NULL;
  if (modes_off(&modes) == 0)
    r = call_bound(im->fn, th_kernel_num_args(k), get_kernel_arg, &c, im->names, im->nkw, NULL);
  modes_restore(&modes);
  if (!r) {
    st = keep_error(im->what);
  } else {
    int n = th_kernel_num_outputs(k);
    bool seq = PyTuple_Check(r) || PyList_Check(r);
    if (n == 1 && !seq) {
      st = bind_output(k, im, 0, r);
    } else if (!seq || PySequence_Fast_GET_SIZE(r) != n) {
      st = th_set_error(TH_ERR_TYPE, "%s returned %s%s; expected %d tensor%s", im->what, seq ? "a sequence of " : "",
                        seq ? "the wrong length" : Py_TYPE(r)->tp_name, n, n == 1 ? "" : "s");
    } else {
      for (int j = 0; j < n && st == TH_OK; j++) st = bind_output(k, im, j, PySequence_Fast_GET_ITEM(r, j));
    }
    Py_DECREF(r);
  }
  PyGILState_Release(g);
  return st;
}

static th_status impl_checker(const th_bsym *b, void *user, bool *claims) {
  const ext_impl *im = user;
  if (!im->checker) return *claims = true, TH_OK;
  PyGILState_STATE g = PyGILState_Ensure();
  th_status st = TH_OK;
  bsym_ctx c = {b};
  PyObject *r = call_bound(im->checker, th_bsym_num_args(b), get_bsym_arg, &c, im->names, im->nkw, NULL);
  int yes = r ? PyObject_IsTrue(r) : -1;
  Py_XDECREF(r);
  if (yes < 0) st = keep_error(im->cwhat);
  *claims = yes > 0;
  PyGILState_Release(g);
  return st;
}

static void impl_free(ext_impl *im) {
  if (!im) return;
  Py_XDECREF(im->fn);
  Py_XDECREF(im->checker);
  Py_XDECREF(im->names);
  PyMem_RawFree(im);
}

static int exec_traverse(PyObject *o, visitproc visit, void *arg) {
  ext_exec *e = (ext_exec *)o;
  for (int i = 0; i < e->nimpls; i++) {
    Py_VISIT(e->impls[i]->fn);
    Py_VISIT(e->impls[i]->checker);
  }
  return 0;
}

static int exec_clear(PyObject *o) {
  ext_exec *e = (ext_exec *)o;
  for (int i = 0; i < e->nimpls; i++) {
    Py_CLEAR(e->impls[i]->fn); /* a program still holding the record reports "the kernel's executor is gone" */
    Py_CLEAR(e->impls[i]->checker);
  }
  return 0;
}

static void exec_dealloc(PyObject *o) {
  ext_exec *e = (ext_exec *)o;
  PyObject_GC_UnTrack(o);
  for (int i = 0; i < nlive; i++)
    if (live[i] == e) {
      live[i] = live[--nlive];
      break;
    }
  th_executor_free(e->ex);
  for (int i = 0; i < e->nimpls; i++) impl_free(e->impls[i]);
  PyMem_RawFree(e->impls);
  PyObject_GC_Del(o);
}

static PyObject *exec_name(PyObject *o, void *c) {
  (void)c;
  const char *n = th_executor_name(((ext_exec *)o)->ex);
  return n ? PyUnicode_FromString(n) : Py_NewRef(Py_None);
}

/* handle.add_impl(qualname, fn, checker, names, nkw, is_view) */
static PyObject *exec_add_impl(PyObject *o, PyObject *args) {
  ext_exec *e = (ext_exec *)o;
  const char *qualname;
  PyObject *fn, *checker, *names;
  int nkw, is_view;
  if (!PyArg_ParseTuple(args, "sOOO!ip:add_impl", &qualname, &fn, &checker, &PyTuple_Type, &names, &nkw, &is_view))
    return NULL;
  if (!PyCallable_Check(fn))
    return PyErr_Format(PyExc_TypeError, "register_implementation: the kernel must be callable, got %s",
                        Py_TYPE(fn)->tp_name),
           NULL;
  if (checker != Py_None && !PyCallable_Check(checker))
    return PyErr_Format(PyExc_TypeError, "register_implementation: checker must be callable, got %s",
                        Py_TYPE(checker)->tp_name),
           NULL;
  if (nkw < 0 || nkw > PyTuple_GET_SIZE(names))
    return PyErr_SetString(PyExc_ValueError, "register_implementation: bad keyword-only count"), NULL;
  if (e->nimpls == e->cap) {
    int cap = e->cap ? 2 * e->cap : 8;
    ext_impl **n = PyMem_RawRealloc(e->impls, sizeof *n * (size_t)cap);
    if (!n) return PyErr_NoMemory();
    e->impls = n;
    e->cap = cap;
  }
  ext_impl *im = PyMem_RawCalloc(1, sizeof *im);
  if (!im) return PyErr_NoMemory();
  snprintf(im->what, sizeof im->what, "the Python kernel of executor '%s'", th_executor_name(e->ex));
  snprintf(im->cwhat, sizeof im->cwhat, "the checker of executor '%s'", th_executor_name(e->ex));
  im->nkw = nkw;
  im->is_view = is_view;
  th_status st = th_executor_add_impl_ex(e->ex, qualname, impl_kernel, checker == Py_None ? NULL : impl_checker, im);
  if (st != TH_OK) {
    PyMem_RawFree(im);
    return pyth_raise(st);
  }
  im->fn = Py_NewRef(fn);
  im->checker = checker == Py_None ? NULL : Py_NewRef(checker);
  im->names = Py_NewRef(names);
  e->impls[e->nimpls++] = im;
  Py_RETURN_NONE;
}

static PyMethodDef exec_methods[] = {
  {"add_impl", exec_add_impl, METH_VARARGS,
   "add_impl(qualname, fn, checker, names, nkw, is_view): th_executor_add_impl_ex with Python callables."},
  {NULL, NULL, 0, NULL},
};

static PyGetSetDef exec_getset[] = {
  {"name", exec_name, NULL, "the executor's name", NULL},
  {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ext_exec_type = {
  PyVarObject_HEAD_INIT(NULL, 0).tp_name = "thunder_c.ExecutorHandle",
  .tp_basicsize = sizeof(ext_exec),
  .tp_dealloc = exec_dealloc,
  .tp_traverse = exec_traverse,
  .tp_clear = exec_clear,
  .tp_methods = exec_methods,
  .tp_getset = exec_getset,
  .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
  .tp_doc = "The core's th_executor behind a thunder_c.extend.OperatorExecutor (freed with it).",
};

/* _ext_executor_new(name) -> ExecutorHandle (ValueError: a bad or taken name, "fuser"/"blas"/"eager"). */
static PyObject *m_executor_new(PyObject *self, PyObject *arg) {
  (void)self;
  const char *name = PyUnicode_Check(arg) ? PyUnicode_AsUTF8(arg) : NULL;
  if (!name)
    return PyErr_Format(PyExc_TypeError, "OperatorExecutor: the name must be a str, got %s", Py_TYPE(arg)->tp_name),
           NULL;
  if (nlive == caplive) {
    int cap = caplive ? 2 * caplive : 8;
    ext_exec **n = PyMem_RawRealloc(live, sizeof *n * (size_t)cap);
    if (!n) return PyErr_NoMemory();
    live = n;
    caplive = cap;
  }
  th_executor *ex = th_executor_new(name);
  if (!ex) return pyth_raise(th_last_status());
  ext_exec *e = PyObject_GC_New(ext_exec, &ext_exec_type);
  if (!e) {
    th_executor_free(ex);
    return NULL;
  }
  e->ex = ex;
  e->impls = NULL;
  e->nimpls = e->cap = 0;
  live[nlive++] = e;
  PyObject_GC_Track((PyObject *)e);
  return (PyObject *)e;
}

int pyth_extend_pin(const th_program *p, PyObject *pinned) {
  const th_trace *tr = th_program_trace(p);
  for (int i = 0; tr && nlive && i < th_trace_num_bsyms(tr); i++) {
    const char *name = th_bsym_executor(th_trace_bsym(tr, i));
    if (!name) continue;
    for (int k = 0; k < nlive; k++) {
      if (strcmp(th_executor_name(live[k]->ex), name)) continue;
      int has = PySequence_Contains(pinned, (PyObject *)live[k]);
      if (has < 0 || (!has && PyList_Append(pinned, (PyObject *)live[k]) < 0)) return -1;
      break;
    }
  }
  return 0;
}

/* _ext_init(TensorProxy): the class whose _make builds the meta-time tensor descriptions. */
static PyObject *m_init(PyObject *self, PyObject *cls) {
  (void)self;
  PyObject *make = PyObject_GetAttrString(cls, "_make");
  if (!make) return NULL;
  Py_XSETREF(meta_proxy_make, make);
  Py_RETURN_NONE;
}

static PyMethodDef extend_functions[] = {
  {"_ext_init", m_init, METH_O, "_ext_init(TensorProxy): set up thunder_c.extend."},
  {"_ext_register_op", m_register_op, METH_VARARGS,
   "_ext_register_op(qualname, schema, meta, like, names, nkw, tags, autocast) -> Op"},
  {"_ext_set_autocast_rule", m_set_autocast_rule, METH_VARARGS, "_ext_set_autocast_rule(qualname, rule)"},
  {"_ext_executor_new", m_executor_new, METH_O, "_ext_executor_new(name) -> ExecutorHandle"},
  {NULL, NULL, 0, NULL},
};

int pyth_extend_ready(PyObject *m) {
  if (PyType_Ready(&ext_exec_type) < 0 || PyModule_AddFunctions(m, extend_functions) < 0) return -1;
  PyObject *tc = PyObject_GetAttrString(pyth_T.torch, "_C");
  set_autocast_gpu = pyth_torch_for_device("set_autocast_enabled", "cuda");
  set_autocast_cpu = pyth_torch_for_device("set_autocast_enabled", "cpu");
  set_grad = tc ? PyObject_GetAttrString(tc, "_set_grad_enabled") : NULL;
  Py_XDECREF(tc);
  if (!set_autocast_gpu || !set_autocast_cpu || !set_grad) return -1;
  PyObject *tags = Py_BuildValue("{sIsIsIsIsI}", "random", (unsigned)TH_OPF_RANDOM, "view", (unsigned)TH_OPF_VIEW,
                                 "lower", (unsigned)TH_OPF_AUTOCAST_LOWER, "fp32", (unsigned)TH_OPF_AUTOCAST_FP32,
                                 "promote", (unsigned)TH_OPF_AUTOCAST_PROMOTE);
  if (!tags || PyModule_AddObject(m, "_ext_tags", tags) < 0) {
    Py_XDECREF(tags);
    return -1;
  }
  return 0;
}
