/* proxy.c — the tracer: what a jitted Python function sees while it is traced.
 *
 * While thunder_c traces a function, its tensor arguments are TensorProxy objects (tensor_proxy.c).
 * Every torch function, Tensor method and Python operator applied to them is mapped to an op of the
 * core — operators through the proxy's number/mapping slots and its attribute lookup, torch functions
 * through the TorchFunctionMode subclass (thunder_c/__init__.py) and __torch_function__, both by the
 * dispatch table (dispatch.c) — and is recorded here, in the core's trace with th_trace_call under the
 * op that ops.def maps the spelling to. Python control flow runs as usual: shapes, dtypes and devices
 * are plain Python values read from the proxy. A value that only exists at run time (Tensor.item,
 * bool(tensor)) cannot be read and raises.
 *
 * This file: Python objects <-> th_arg, source locations, the autocast state, and pyth_record with
 * the alias groups that functionalize in-place updates. An in-place op (a.add_(1), a += 1) is recorded
 * as the core's in-place op, whose output is the new version of `a`; the same Python object then
 * stands for that new version, as in PyTorch, and so do the other proxies of its alias group (views).
 *
 * Real torch tensors met while tracing (closures, plain tensor attributes of a module) are
 * captured: they become inputs of the trace, read afresh at every call. */
#include <string.h>

#include "proxy.h"

/* Per thread: each Python thread traces on its own (the GIL is released between bytecodes). */
_Thread_local pyth_tracer *pyth_active;

/* ---- memory for argument trees ------------------------------------------------------------------ */

void *pyth_pool_alloc(pyth_pool *p, size_t n) {
  if (p->n == p->cap) {
    int cap = p->cap ? 2 * p->cap : 8;
    void **b = PyMem_Realloc(p->blocks, sizeof(void *) * (size_t)cap);
    if (!b) return PyErr_NoMemory(), NULL;
    p->blocks = b;
    p->cap = cap;
  }
  void *m = PyMem_Calloc(1, n ? n : 1);
  if (!m) return PyErr_NoMemory(), NULL;
  p->blocks[p->n++] = m;
  return m;
}

void pyth_pool_free(pyth_pool *p) {
  for (int i = 0; i < p->n; i++) PyMem_Free(p->blocks[i]);
  PyMem_Free(p->blocks);
  p->blocks = NULL;
  p->n = p->cap = 0;
}

/* ---- Python -> th_arg --------------------------------------------------------------------------- */

/* A real torch tensor met while tracing: becomes (once per object) an input of the trace. */
static int lift_tensor(pyth_tracer *tr, PyObject *t, th_arg *out) {
  PyObject *key = PyLong_FromVoidPtr(t);
  if (!key) return -1;
  PyObject *have = PyDict_GetItemWithError(tr->lifted_ids, key);
  if (have) {
    Py_DECREF(key);
    *out = th_arg_value(((pyth_proxy *)have)->value);
    return 0;
  }
  if (PyErr_Occurred()) return Py_DECREF(key), -1;
  if (pyth_tensor_check_class(t, "a tensor the function reads (captured, or made while tracing)") < 0)
    return Py_DECREF(key), -1;
  int rc = -1;
  PyObject *dt = PyObject_GetAttrString(t, "dtype"), *shape = PyObject_GetAttrString(t, "shape");
  PyObject *dev = PyObject_GetAttrString(t, "device");
  th_dtype dtype;
  th_device device;
  if (!dt || !shape || !dev) goto done;
  if (!pyth_dtype_from(dt, &dtype)) {
    PyErr_Format(PyExc_NotImplementedError,
                 "thunder_c: a captured tensor has dtype %R, which thunder_c does not support", dt);
    goto done;
  }
  if (!pyth_device_from(dev, &device)) {
    PyErr_Format(PyExc_NotImplementedError,
                 "thunder_c: a captured tensor is on device %R, which thunder_c does not support", dev);
    goto done;
  }
  Py_ssize_t nd = PyTuple_Size(shape);
  if (nd < 0) goto done;
  if (nd > TH_MAX_DIMS) {
    PyErr_Format(PyExc_NotImplementedError, "thunder_c: tensors of rank %zd are not supported (at most %d)", nd,
                 TH_MAX_DIMS);
    goto done;
  }
  int64_t sh[TH_MAX_DIMS];
  for (Py_ssize_t i = 0; i < nd; i++) {
    sh[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i));
    if (sh[i] == -1 && PyErr_Occurred()) goto done;
  }
  char name[32];
  snprintf(name, sizeof name, "c%d", tr->nlifted);
  th_value *v = th_trace_add_tensor_input(tr->trace, name, dtype, device, (int)nd, sh);
  if (!v) v = th_trace_add_tensor_input(tr->trace, NULL, dtype, device, (int)nd, sh); /* name taken */
  if (!v) {
    pyth_raise(th_last_status());
    goto done;
  }
  PyObject *px = pyth_proxy_new(tr, v);
  if (!px) goto done;
  if (PyDict_SetItem(tr->lifted_ids, key, px) < 0 || PyList_Append(tr->lifted, t) < 0) {
    Py_DECREF(px);
    goto done;
  }
  Py_DECREF(px);
  tr->nlifted++;
  *out = th_arg_value(v);
  rc = 0;
done:
  Py_XDECREF(dt);
  Py_XDECREF(shape);
  Py_XDECREF(dev);
  Py_DECREF(key);
  return rc;
}

static int seq_to_arg(pyth_tracer *tr, PyObject *o, th_arg *out, pyth_pool *pool, const char *who, bool list) {
  PyObject *fast = PySequence_Fast(o, "not a sequence");
  if (!fast) return -1;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  th_arg *items = pyth_pool_alloc(pool, sizeof(th_arg) * (size_t)(n ? n : 1));
  if (!items) return Py_DECREF(fast), -1;
  for (Py_ssize_t i = 0; i < n; i++)
    if (pyth_to_arg(tr, PySequence_Fast_GET_ITEM(fast, i), &items[i], pool, who) < 0) return Py_DECREF(fast), -1;
  Py_DECREF(fast);
  *out = list ? th_arg_list((int)n, items) : th_arg_tuple((int)n, items);
  return 0;
}

static int slice_part(PyObject *o, bool *has, int64_t *v, const char *who) {
  if (o == Py_None) {
    *has = false;
    return 0;
  }
  if (Py_TYPE(o) == &pyth_proxy_type) {
    PyErr_Format(PyExc_NotImplementedError, "%s: a slice bound that is a tensor is not supported", who);
    return -1;
  }
  PyObject *i = PyNumber_Index(o);
  if (!i) return -1;
  *v = PyLong_AsLongLong(i);
  Py_DECREF(i);
  if (*v == -1 && PyErr_Occurred()) return -1;
  *has = true;
  return 0;
}

int pyth_to_arg(pyth_tracer *tr, PyObject *o, th_arg *out, pyth_pool *pool, const char *who) {
  if (Py_TYPE(o) == &pyth_proxy_type) {
    th_value *v = pyth_proxy_value(o);
    if (!v) return -1;
    *out = th_arg_value(v);
    return 0;
  }
  if (o == Py_None) return *out = th_arg_none(), 0;
  if (PyBool_Check(o)) return *out = th_arg_bool(o == Py_True), 0;
  if (PyLong_Check(o)) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow) {
      PyErr_Format(PyExc_OverflowError, "%s: the integer %R does not fit in int64", who, o);
      return -1;
    }
    if (v == -1 && PyErr_Occurred()) return -1;
    *out = th_arg_int(v);
    return 0;
  }
  if (PyFloat_Check(o)) return *out = th_arg_float(PyFloat_AS_DOUBLE(o)), 0;
  if (PyUnicode_Check(o)) {
    const char *s = PyUnicode_AsUTF8(o);
    if (!s) return -1;
    *out = th_arg_str(s); /* the caller keeps o alive; th_trace_call copies it */
    return 0;
  }
  th_dtype dt;
  if (pyth_dtype_from(o, &dt)) return *out = th_arg_dtype(dt), 0;
  if (PyObject_TypeCheck(o, (PyTypeObject *)pyth_T.device_type)) {
    th_device d;
    if (!pyth_device_from(o, &d)) {
      PyErr_Format(PyExc_NotImplementedError, "%s: device %R is not supported by thunder_c", who, o);
      return -1;
    }
    *out = th_arg_device(d);
    return 0;
  }
  if (PyTuple_Check(o)) return seq_to_arg(tr, o, out, pool, who, false); /* torch.Size too */
  if (PyList_Check(o)) return seq_to_arg(tr, o, out, pool, who, true);
  if (PySlice_Check(o)) {
    PySliceObject *s = (PySliceObject *)o;
    th_arg a = {TH_ARG_SLICE, {0}};
    if (slice_part(s->start, &a.u.slice.has_start, &a.u.slice.start, who) < 0 ||
        slice_part(s->stop, &a.u.slice.has_stop, &a.u.slice.stop, who) < 0 ||
        slice_part(s->step, &a.u.slice.has_step, &a.u.slice.step, who) < 0)
      return -1;
    *out = a;
    return 0;
  }
  if (o == Py_Ellipsis) return out->kind = TH_ARG_ELLIPSIS, 0;
  if (pyth_T.memory_format_type && Py_TYPE(o) == (PyTypeObject *)pyth_T.memory_format_type) {
    /* thunder-c's outputs are contiguous, so contiguous_format and preserve_format give the same values */
    if (o == pyth_T.contiguous_format || o == pyth_T.preserve_format) return *out = th_arg_none(), 0;
    PyErr_Format(PyExc_NotImplementedError, "%s: memory_format=%R is not supported by thunder_c", who, o);
    return -1;
  }
  if (PyObject_TypeCheck(o, (PyTypeObject *)pyth_T.tensor_type)) return lift_tensor(tr, o, out);
  if (PyDict_Check(o)) {
    Py_ssize_t n = PyDict_Size(o), pos = 0, i = 0;
    th_arg *items = pyth_pool_alloc(pool, sizeof(th_arg) * (size_t)(n ? n : 1));
    const char **keys = pyth_pool_alloc(pool, sizeof(char *) * (size_t)(n ? n : 1));
    if (!items || !keys) return -1;
    PyObject *k, *v;
    while (PyDict_Next(o, &pos, &k, &v)) {
      if (!PyUnicode_Check(k)) {
        PyErr_Format(PyExc_TypeError, "%s: dict keys must be str, not %s", who, Py_TYPE(k)->tp_name);
        return -1;
      }
      if (!(keys[i] = PyUnicode_AsUTF8(k)) || pyth_to_arg(tr, v, &items[i], pool, who) < 0) return -1;
      i++;
    }
    th_arg a = th_arg_tuple((int)n, items);
    a.kind = TH_ARG_DICT;
    a.u.seq.keys = keys;
    *out = a;
    return 0;
  }
  if (pyth_T.numpy_ndarray && PyObject_TypeCheck(o, (PyTypeObject *)pyth_T.numpy_ndarray)) {
    /* a NumPy array operand: a constant tensor with its values (captured like a closure tensor) */
    PyObject *t = PyObject_CallMethod(pyth_T.torch, "as_tensor", "O", o);
    if (!t) return -1;
    int r = lift_tensor(tr, t, out); /* the lifted list keeps the converted tensor alive */
    Py_DECREF(t);
    return r;
  }
  if (PyIndex_Check(o)) { /* numpy integers, ... */
    PyObject *i = PyNumber_Index(o);
    if (!i) return -1;
    int r = pyth_to_arg(tr, i, out, pool, who);
    Py_DECREF(i);
    return r;
  }
  if (PyObject_HasAttrString(o, "__float__") && !PyObject_HasAttrString(o, "__torch_function__")) {
    double f = PyFloat_AsDouble(o);
    if (f == -1.0 && PyErr_Occurred()) return -1;
    *out = th_arg_float(f);
    return 0;
  }
  PyErr_Format(PyExc_TypeError, "%s: an argument of type %s is not supported by thunder_c", who, Py_TYPE(o)->tp_name);
  return -1;
}

/* ---- th_arg -> Python -------------------------------------------------------------------------- */

PyObject *pyth_from_arg(pyth_tracer *tr, const th_arg *a) {
  switch (a->kind) {
    case TH_ARG_NONE: Py_RETURN_NONE;
    case TH_ARG_VALUE: {
      th_value *v = a->u.value;
      if (th_value_is_tensor(v)) return pyth_proxy_new(tr, v);
      PyErr_Format(PyExc_NotImplementedError, "thunder_c: the number %s is only known at run time", th_value_name(v));
      return NULL;
    }
    case TH_ARG_BOOL: return PyBool_FromLong(a->u.b);
    case TH_ARG_INT: return PyLong_FromLongLong(a->u.i);
    case TH_ARG_FLOAT: return PyFloat_FromDouble(a->u.f);
    case TH_ARG_STR: return PyUnicode_FromString(a->u.s);
    case TH_ARG_DTYPE: {
      PyObject *d = pyth_T.dtypes[a->u.dtype] ? pyth_T.dtypes[a->u.dtype] : pyth_dtypes[a->u.dtype];
      return Py_NewRef(d);
    }
    case TH_ARG_DEVICE: return pyth_device_to_torch(a->u.device);
    case TH_ARG_TUPLE:
    case TH_ARG_LIST: {
      PyObject *r = a->kind == TH_ARG_TUPLE ? PyTuple_New(a->u.seq.n) : PyList_New(a->u.seq.n);
      if (!r) return NULL;
      for (int i = 0; i < a->u.seq.n; i++) {
        PyObject *x = pyth_from_arg(tr, &a->u.seq.items[i]);
        if (!x) return Py_DECREF(r), NULL;
        if (a->kind == TH_ARG_TUPLE)
          PyTuple_SET_ITEM(r, i, x);
        else
          PyList_SET_ITEM(r, i, x);
      }
      return r;
    }
    default:
      PyErr_Format(PyExc_NotImplementedError, "thunder_c: an op returned a %s, which has no Python form",
                   th_arg_kind_name(a));
      return NULL;
  }
}

/* ---- source locations ---------------------------------------------------------------------------- */

/* Records "# file:line: \tsource" before the first op of each new user source line, as Thunder's
 * first trace does. Frames in thunder_c's and torch's own files are skipped. Best effort: a failure
 * here never fails the op. */
static bool skipped_frame(pyth_tracer *tr, PyObject *fn) {
  static const char *const torch_wrappers[] = {"overrides.py",         "_tensor.py",       "functional.py",
                                               "nn/functional.py",     "_jit_internal.py", "nn/modules/module.py",
                                               "autograd/grad_mode.py"};
  if (tr->pkg_dir && PyUnicode_Tailmatch(fn, tr->pkg_dir, 0, PY_SSIZE_T_MAX, -1) == 1) return true;
  if (!tr->torch_dir || PyUnicode_Tailmatch(fn, tr->torch_dir, 0, PY_SSIZE_T_MAX, -1) != 1) return false;
  /* in torch: only the wrappers that forward a call (handle_torch_function, Module.__call__) */
  const char *f = PyUnicode_AsUTF8(fn);
  Py_ssize_t skip = PyUnicode_GetLength(tr->torch_dir);
  if (!f) return PyErr_Clear(), false;
  const char *rest = f + strlen(f) - (size_t)(PyUnicode_GetLength(fn) - skip); /* ASCII paths */
  for (size_t i = 0; i < sizeof torch_wrappers / sizeof *torch_wrappers; i++)
    if (!strcmp(rest, torch_wrappers[i])) return true;
  return false;
}

static void record_location(pyth_tracer *tr) {
  PyFrameObject *f = PyEval_GetFrame();
  Py_XINCREF(f);
  while (f) {
    PyCodeObject *code = PyFrame_GetCode(f);
    PyObject *fn = code->co_filename;
    if (!skipped_frame(tr, fn)) {
      int line = PyFrame_GetLineNumber(f);
      const char *file = PyUnicode_AsUTF8(fn);
      if (file && (line != tr->last_line || strcmp(file, tr->last_file) != 0)) {
        tr->last_line = line;
        tr->last_file[0] = 0;
        PyObject *src =
          pyth_T.linecache_getline ? PyObject_CallFunction(pyth_T.linecache_getline, "Oi", fn, line) : NULL;
        const char *s = src && PyUnicode_Check(src) ? PyUnicode_AsUTF8(src) : "";
        char text[512];
        snprintf(text, sizeof text, "%s:%d: \t%s", file, line, s ? s : "");
        size_t n = strlen(text);
        while (n && (text[n - 1] == '\n' || text[n - 1] == '\r' || text[n - 1] == ' ')) text[--n] = 0;
        for (char *c = text; *c; c++)
          if ((unsigned char)*c < 0x20 && *c != '\t') *c = ' ';
        Py_XDECREF(src);
        if (th_trace_add_comment(tr->trace, text) == TH_OK) snprintf(tr->last_file, sizeof tr->last_file, "%s", file);
      }
      Py_DECREF(code);
      Py_DECREF(f);
      PyErr_Clear();
      return;
    }
    Py_DECREF(code);
    PyFrameObject *back = PyFrame_GetBack(f);
    Py_DECREF(f);
    f = back;
  }
  PyErr_Clear();
}

/* ---- autocast ------------------------------------------------------------------------------------ */

/* torch.autocast is a Python context manager that flips torch's global state; nothing is called that
 * the tracer could see. So before each op the tracer reads that state and, when it changed since the
 * last op, replaces the trace's regions with a cpu and a cuda region that say the same. The core's
 * autocast rules do the rest (th_trace_autocast_push). */
static PyObject *read_autocast_state(void) {
  PyObject *v[4] = {PyObject_CallNoArgs(pyth_T.is_autocast_cpu_enabled),
                    PyObject_CallNoArgs(pyth_T.get_autocast_cpu_dtype), PyObject_CallNoArgs(pyth_T.is_autocast_enabled),
                    PyObject_CallNoArgs(pyth_T.get_autocast_gpu_dtype)};
  PyObject *t = v[0] && v[1] && v[2] && v[3] ? PyTuple_Pack(4, v[0], v[1], v[2], v[3]) : NULL;
  for (int i = 0; i < 4; i++) Py_XDECREF(v[i]);
  return t;
}

void pyth_autocast_clear(pyth_tracer *tr) {
  while (tr->autocast_pushed > 0) {
    th_trace_autocast_pop(tr->trace);
    tr->autocast_pushed--;
  }
  Py_CLEAR(tr->autocast_state);
}

int pyth_autocast_sync(pyth_tracer *tr) {
  if (tr->autocast_forced) return 0;
  PyObject *st = read_autocast_state();
  if (!st) return -1;
  if (tr->autocast_state) {
    int same = PyObject_RichCompareBool(st, tr->autocast_state, Py_EQ);
    if (same != 0) {
      Py_DECREF(st);
      return same < 0 ? -1 : 0;
    }
  }
  pyth_autocast_clear(tr);
  tr->autocast_state = st;
  for (int d = 0; d < 2; d++) {
    bool on = PyTuple_GET_ITEM(st, 2 * d) == Py_True;
    th_dtype dt = TH_BF16;
    if (on && !pyth_dtype_from(PyTuple_GET_ITEM(st, 2 * d + 1), &dt)) {
      PyErr_Format(PyExc_NotImplementedError, "thunder_c: autocast to %R is not supported",
                   PyTuple_GET_ITEM(st, 2 * d + 1));
      return -1;
    }
    th_status s = th_trace_autocast_push(tr->trace, d == 0 ? TH_CPU : TH_CUDA, dt, on);
    if (s != TH_OK) return pyth_raise(s), -1;
    tr->autocast_pushed++;
  }
  return 0;
}

/* ---- recording ------------------------------------------------------------------------------------ */

/* ---- aliasing: functionalization of in-place updates ----------------------------------------------
 * Proxies whose tensors may share memory at run time form an alias group: the outputs of view ops
 * (and of ops the core says may return an input, th_bsym_output_may_alias) join their input's group,
 * and inputs whose memory overlaps start in one group (jit.c). After an in-place op updates a member,
 * every other member gets its new version, `prims.update_aliases(member, updated)`, and the proxy
 * stands for it from then on: later uses read the update, in every pass, by data dependence. At run
 * time update_aliases is the member itself, so an update shows through exactly the tensors that
 * really share memory, as in PyTorch (a reshape that had to copy is not affected). */
static PyObject *group_of(pyth_tracer *tr, PyObject *p) {
  PyObject *g = PyDict_GetItemWithError(tr->groups, p);
  if (!g) PyErr_Clear();
  return g;
}

int pyth_alias_join(pyth_tracer *tr, PyObject *a, PyObject *b) {
  if (a == b) return 0;
  PyObject *ga = group_of(tr, a), *gb = group_of(tr, b);
  if (ga && ga == gb) return 0;
  if (!ga && !gb) {
    PyObject *g = PyList_New(0);
    int r = g && PyList_Append(g, a) == 0 && PyList_Append(g, b) == 0 && PyDict_SetItem(tr->groups, a, g) == 0 &&
                PyDict_SetItem(tr->groups, b, g) == 0
              ? 0
              : -1;
    Py_XDECREF(g);
    return r;
  }
  if (!ga) { /* join b's group */
    PyObject *t = a;
    a = b;
    b = t;
    ga = gb;
    gb = NULL;
  }
  if (!gb) return PyList_Append(ga, b) == 0 && PyDict_SetItem(tr->groups, b, ga) == 0 ? 0 : -1;
  Py_INCREF(gb);
  int r = 0;
  for (Py_ssize_t i = 0; r == 0 && i < PyList_GET_SIZE(gb); i++) {
    PyObject *m = PyList_GET_ITEM(gb, i);
    r = PyList_Append(ga, m) == 0 && PyDict_SetItem(tr->groups, m, ga) == 0 ? 0 : -1;
  }
  Py_DECREF(gb);
  return r;
}

/* After `self` was updated in place: the other members of its group get their new versions. */
static int update_aliases(pyth_tracer *tr, pyth_proxy *self) {
  PyObject *g = group_of(tr, (PyObject *)self);
  if (!g) return 0;
  Py_INCREF(g);
  int r = 0;
  for (Py_ssize_t i = 0; r == 0 && i < PyList_GET_SIZE(g); i++) {
    pyth_proxy *m = (pyth_proxy *)PyList_GET_ITEM(g, i);
    if (m == self || !pyth_proxy_live(m)) continue;
    th_arg a[2] = {th_arg_value(m->value), th_arg_value(self->value)}, out;
    th_status st = th_trace_call(tr->trace, "prims.update_aliases", 2, a, 0, NULL, NULL, &out);
    if (st != TH_OK) {
      pyth_raise(st);
      r = -1;
    } else {
      m->value = out.u.value;
    }
  }
  Py_DECREF(g);
  return r;
}

/* Outputs that may share memory with the op's first tensor argument join its group. */
static int note_aliases(pyth_tracer *tr, PyObject *args, PyObject *res) {
  PyObject *src = NULL;
  for (Py_ssize_t i = 0; !src && i < PyTuple_GET_SIZE(args); i++)
    if (Py_TYPE(PyTuple_GET_ITEM(args, i)) == &pyth_proxy_type) src = PyTuple_GET_ITEM(args, i);
  int n = th_trace_num_bsyms(tr->trace);
  const th_bsym *b = n ? th_trace_bsym(tr->trace, n - 1) : NULL;
  if (!src || !b) return 0;
  if (Py_TYPE(res) == &pyth_proxy_type)
    return th_bsym_output_may_alias(b, ((pyth_proxy *)res)->value) ? pyth_alias_join(tr, src, res) : 0;
  if (PyTuple_Check(res))
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(res); i++) {
      PyObject *o = PyTuple_GET_ITEM(res, i);
      if (Py_TYPE(o) == &pyth_proxy_type && th_bsym_output_may_alias(b, ((pyth_proxy *)o)->value) &&
          pyth_alias_join(tr, src, o) < 0)
        return -1;
    }
  return 0;
}

PyObject *pyth_record(const char *qualname, const char *display, unsigned flags, PyObject *args, PyObject *kwargs) {
  pyth_tracer *tr = pyth_active;
  for (Py_ssize_t i = 0; !tr && i < PyTuple_GET_SIZE(args); i++)
    if (Py_TYPE(PyTuple_GET_ITEM(args, i)) == &pyth_proxy_type)
      return pyth_proxy_value(PyTuple_GET_ITEM(args, i)), NULL;
  if (!tr)
    return PyErr_Format(PyExc_RuntimeError, "%s can only be called inside a function compiled with thunder_c.jit",
                        display),
           NULL;
  char who[200];
  snprintf(who, sizeof who, "%s", display);
  pyth_pool pool = {0};
  PyObject *res = NULL;
  pyth_proxy *self = NULL;      /* in-place ops: the tensor updated */
  PyObject *self_tensor = NULL; /* ... when it is a captured torch tensor: that tensor */
  Py_ssize_t na = PyTuple_GET_SIZE(args), nk = kwargs ? PyDict_Size(kwargs) : 0;
  th_arg *a = pyth_pool_alloc(&pool, sizeof(th_arg) * (size_t)(na + 1));
  th_arg *kw = pyth_pool_alloc(&pool, sizeof(th_arg) * (size_t)(nk + 1));
  const char **kn = pyth_pool_alloc(&pool, sizeof(char *) * (size_t)(nk + 1));
  if (!a || !kw || !kn) goto done;
  if ((flags & TH_OPF_IN_PLACE) && na > 0 && Py_TYPE(PyTuple_GET_ITEM(args, 0)) == &pyth_proxy_type)
    self = (pyth_proxy *)PyTuple_GET_ITEM(args, 0);
  for (Py_ssize_t i = 0; i < na; i++)
    if (pyth_to_arg(tr, PyTuple_GET_ITEM(args, i), &a[i], &pool, who) < 0) goto done;
  if ((flags & TH_OPF_IN_PLACE) && !self && na > 0 &&
      PyObject_TypeCheck(PyTuple_GET_ITEM(args, 0), (PyTypeObject *)pyth_T.tensor_type)) {
    /* an in-place update of a captured tensor (G.add_(x), G a global): its proxy takes the new version */
    PyObject *key = PyLong_FromVoidPtr(PyTuple_GET_ITEM(args, 0));
    self = key ? (pyth_proxy *)PyDict_GetItemWithError(tr->lifted_ids, key) : NULL;
    Py_XDECREF(key);
    if (!self && PyErr_Occurred()) goto done;
    if (self) self_tensor = PyTuple_GET_ITEM(args, 0);
  }
  if (nk) {
    Py_ssize_t pos = 0, i = 0;
    PyObject *k, *v;
    while (PyDict_Next(kwargs, &pos, &k, &v)) {
      if (!(kn[i] = PyUnicode_AsUTF8(k))) goto done;
      /* torch.nn.functional passes _stacklevel (where its warnings point): not an argument of the op */
      if (!strcmp(kn[i], "_stacklevel")) continue;
      /* memory_format=torch.contiguous_format / preserve_format: outputs are contiguous either way */
      if (!strcmp(kn[i], "memory_format") && (v == pyth_T.contiguous_format || v == pyth_T.preserve_format)) continue;
      if (pyth_to_arg(tr, v, &kw[i], &pool, who) < 0) goto done;
      i++;
    }
    nk = i;
  }
  if (self && tr->grad_leaves && PySet_Contains(tr->grad_leaves, (PyObject *)self) == 1) {
    PyObject *ge = PyObject_CallNoArgs(pyth_T.is_grad_enabled);
    bool on = ge == Py_True;
    Py_XDECREF(ge);
    if (on) { /* PyTorch's rule for leaves of the autograd graph */
      PyErr_Format(PyExc_RuntimeError,
                   "%s: an input that requires grad is updated in place: PyTorch refuses this for a leaf (\"a leaf "
                   "Variable that requires grad is being used in an in-place operation.\"), and thunder_c for every "
                   "input that requires grad (a non-leaf one too); update a clone instead",
                   display);
      goto done;
    }
  }
  { /* an op inside torch.no_grad(): no gradient flows through it (autograd.c refuses it) */
    PyObject *ge = PyObject_CallNoArgs(pyth_T.is_grad_enabled);
    if (!ge) goto done;
    tr->grad_stops += ge == Py_False;
    Py_DECREF(ge);
  }
  if (pyth_autocast_sync(tr) < 0) goto done;
  record_location(tr);
  th_arg out;
  th_status st = th_trace_call(tr->trace, qualname, (int)na, a, (int)nk, kn, kw, &out);
  if (st != TH_OK) {
    pyth_raise(st);
    goto done;
  }
  if (self && out.kind == TH_ARG_VALUE) {
    self->value = out.u.value;
    if (update_aliases(tr, self) < 0) goto done;
    /* G.add_(x) returns G itself: `G += x` must leave the user's tensor bound, not a proxy */
    res = Py_NewRef(self_tensor ? self_tensor : (PyObject *)self);
  } else {
    res = pyth_from_arg(tr, &out);
    if (res && note_aliases(tr, args, res) < 0) Py_CLEAR(res);
    /* PyTorch returns named tuples for some ops (x.max(dim=1).values): torch.return_types.<op> */
    if (res && PyTuple_CheckExact(res) && pyth_T.return_types) {
      const char *dot = strrchr(qualname, '.');
      PyObject *rt = PyObject_GetAttrString(pyth_T.return_types, dot ? dot + 1 : qualname);
      if (rt && PyType_Check(rt)) Py_SETREF(res, PyObject_CallOneArg(rt, res));
      Py_XDECREF(rt);
      if (!rt) PyErr_Clear();
    }
  }
done:
  pyth_pool_free(&pool);
  return res;
}
