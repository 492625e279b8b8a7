/* proxy.c — TensorProxy and the tracer: what a jitted Python function sees while it is traced.
 *
 * While thunder_c traces a function, its tensor arguments are TensorProxy objects. Every torch
 * function, Tensor method and Python operator applied to them comes here — operators through the
 * proxy's number/mapping slots and its attribute lookup, torch functions through the
 * TorchFunctionMode subclass (thunder_c/__init__.py) and __torch_function__ — and is recorded in
 * the core's trace with th_trace_call under the op that ops.def maps the spelling to. Python control
 * flow runs as usual: shapes, dtypes and devices are plain Python values read from the proxy. A
 * value that only exists at run time (Tensor.item, bool(tensor)) cannot be read and raises.
 *
 * An in-place op (a.add_(1), a += 1) is recorded as the core's in-place op, whose output is the new
 * version of `a`; the same Python object then stands for that new version, as in PyTorch. Views of
 * a tensor updated in place are not functionalized yet: such a program raises NotImplementedError
 * instead of computing stale values.
 *
 * Real torch tensors met while tracing (closures, plain tensor attributes of a module) are
 * captured: they become inputs of the trace, read afresh at every call. */
#include <string.h>

#include "pyth.h"

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

/* ---- proxies ------------------------------------------------------------------------------------ */

PyObject *pyth_proxy_new(pyth_tracer *tr, th_value *v) {
  pyth_proxy *p = PyObject_New(pyth_proxy, &pyth_proxy_type);
  if (!p) return NULL;
  memcpy(p->torch_payload, pyth_T.stand_in_words, sizeof p->torch_payload);
  p->value = v;
  p->tracer = tr;
  p->epoch = tr->epoch;
  return (PyObject *)p;
}

static bool proxy_live(const pyth_proxy *p) {
  return pyth_active && p->tracer == pyth_active && p->epoch == pyth_active->epoch;
}

/* The proxy's value, or NULL with RuntimeError if the proxy outlived its trace. */
static th_value *proxy_value(PyObject *o) {
  pyth_proxy *p = (pyth_proxy *)o;
  if (!proxy_live(p)) { /* its value may be freed with its trace: do not read it */
    PyErr_SetString(PyExc_RuntimeError,
                    "thunder_c: a TensorProxy was used outside the trace that made it (a proxy only "
                    "exists while thunder_c.jit traces the function; do not keep it after the call)");
    return NULL;
  }
  return p->value;
}

static void proxy_dealloc(PyObject *o) { PyObject_Free(o); }

static PyObject *proxy_repr(PyObject *o) {
  pyth_proxy *p = (pyth_proxy *)o;
  if (!proxy_live(p)) return PyUnicode_FromString("<TensorProxy (expired: its trace has ended)>");
  char dev[32], buf[160];
  th_device_str(th_value_device(p->value), dev, sizeof dev);
  int n = snprintf(buf, sizeof buf, "<TensorProxy %s: %s %s[", th_value_name(p->value) ? th_value_name(p->value) : "?",
                   dev, th_dtype_short(th_value_dtype(p->value)));
  for (int i = 0; i < th_value_ndim(p->value) && n < (int)sizeof buf - 24; i++)
    n += snprintf(buf + n, sizeof buf - (size_t)n, "%s%lld", i ? ", " : "", (long long)th_value_shape(p->value)[i]);
  snprintf(buf + n, sizeof buf - (size_t)n, "]>");
  return PyUnicode_FromString(buf);
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
    PyErr_Format(PyExc_NotImplementedError, "thunder_c: a captured tensor has dtype %R, which thunder_c does not support", dt);
    goto done;
  }
  if (!pyth_device_from(dev, &device)) {
    PyErr_Format(PyExc_NotImplementedError, "thunder_c: a captured tensor is on device %R, which thunder_c does not support", dev);
    goto done;
  }
  Py_ssize_t nd = PyTuple_Size(shape);
  if (nd < 0) goto done;
  if (nd > TH_MAX_DIMS) {
    PyErr_Format(PyExc_NotImplementedError, "thunder_c: tensors of rank %zd are not supported (at most %d)", nd, TH_MAX_DIMS);
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
    th_value *v = proxy_value(o);
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
        if (a->kind == TH_ARG_TUPLE) PyTuple_SET_ITEM(r, i, x);
        else PyList_SET_ITEM(r, i, x);
      }
      return r;
    }
    default:
      PyErr_Format(PyExc_NotImplementedError, "thunder_c: an op returned a %s, which has no Python form", th_arg_kind_name(a));
      return NULL;
  }
}

/* ---- source locations ---------------------------------------------------------------------------- */

/* Records "# file:line: \tsource" before the first op of each new user source line, as Thunder's
 * first trace does. Frames in thunder_c's and torch's own files are skipped. Best effort: a failure
 * here never fails the op. */
static bool skipped_frame(pyth_tracer *tr, PyObject *fn) {
  static const char *const torch_wrappers[] = {"overrides.py", "_tensor.py", "functional.py", "nn/functional.py",
                                               "_jit_internal.py", "nn/modules/module.py", "autograd/grad_mode.py"};
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
        PyObject *src = pyth_T.linecache_getline ? PyObject_CallFunction(pyth_T.linecache_getline, "Oi", fn, line) : NULL;
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
  PyObject *v[4] = {PyObject_CallNoArgs(pyth_T.is_autocast_cpu_enabled), PyObject_CallNoArgs(pyth_T.get_autocast_cpu_dtype),
                    PyObject_CallNoArgs(pyth_T.is_autocast_enabled), PyObject_CallNoArgs(pyth_T.get_autocast_gpu_dtype)};
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
      PyErr_Format(PyExc_NotImplementedError, "thunder_c: autocast to %R is not supported", PyTuple_GET_ITEM(st, 2 * d + 1));
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
                    PyDict_SetItem(tr->groups, b, g) == 0 ? 0 : -1;
    Py_XDECREF(g);
    return r;
  }
  if (!ga) { /* join b's group */
    PyObject *t = a; a = b; b = t;
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
    if (m == self || !proxy_live(m)) continue;
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

PyObject *pyth_record(const char *qualname, const char *display, unsigned flags, PyObject *args,
                      PyObject *kwargs) {
  pyth_tracer *tr = pyth_active;
  for (Py_ssize_t i = 0; !tr && i < PyTuple_GET_SIZE(args); i++)
    if (Py_TYPE(PyTuple_GET_ITEM(args, i)) == &pyth_proxy_type) return proxy_value(PyTuple_GET_ITEM(args, i)), NULL;
  if (!tr)
    return PyErr_Format(PyExc_RuntimeError,
                        "%s can only be called inside a function compiled with thunder_c.jit", display), NULL;
  char who[200];
  snprintf(who, sizeof who, "%s", display);
  pyth_pool pool = {0};
  PyObject *res = NULL;
  pyth_proxy *self = NULL;     /* in-place ops: the tensor updated */
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

/* ---- the dispatch table: Python callables -> ops ------------------------------------------------- */

/* An op as the tracer calls it: qualified name, the spelling users know (for errors), flags, and
 * whether the first two positional arguments are swapped (Tensor.__rsub__(a, b) is b - a). */
typedef struct {
  PyObject_HEAD
  PyObject *qualname; /* str */
  PyObject *display;  /* str */
  unsigned flags;
  bool swap;
  PyObject *self; /* bound methods (x.add): the proxy; NULL otherwise */
} pyth_op;

static PyObject *dispatch;     /* dict: torch callable -> pyth_op */
static PyObject *methods;      /* dict: Tensor method name -> pyth_op */
static PyObject *passthrough;  /* set: torch callables that only read metadata (run eagerly) */
PyObject *pyth_passthrough_marker;

static void op_dealloc(PyObject *o) {
  pyth_op *op = (pyth_op *)o;
  Py_XDECREF(op->qualname);
  Py_XDECREF(op->display);
  Py_XDECREF(op->self);
  PyObject_Free(o);
}

static PyObject *op_call_args(pyth_op *op, PyObject *args, PyObject *kwargs) {
  const char *q = PyUnicode_AsUTF8(op->qualname), *d = PyUnicode_AsUTF8(op->display);
  if (!q || !d) return NULL;
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
  if (!op->self) return op_call_args(op, args, kwargs);
  Py_ssize_t n = PyTuple_GET_SIZE(args);
  PyObject *full = PyTuple_New(n + 1);
  if (!full) return NULL;
  PyTuple_SET_ITEM(full, 0, Py_NewRef(op->self));
  for (Py_ssize_t i = 0; i < n; i++) PyTuple_SET_ITEM(full, i + 1, Py_NewRef(PyTuple_GET_ITEM(args, i)));
  PyObject *r = op_call_args(op, full, kwargs);
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
  if (!strncmp(alias, "Tensor.", 7)) method = alias + 7;
  else if (!strncmp(alias, "torch.Tensor.", 13)) method = alias + 13;
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
  if (r == 0 && method && !PyDict_GetItemString(methods, method)) {
    PyObject *op = pyth_op_new(qualname, display, flags, swap, NULL);
    if (!op) return -1;
    r = PyDict_SetItemString(methods, method, op);
    Py_DECREF(op);
  }
  return r;
}

/* Python protocol spellings the op table does not list: reflected operators (swapped operands)
 * and a few forward operators. */
static const struct { const char *method, *qualname; bool swap; } protocol[] = {
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
    "shape", "dtype", "device", "ndim", "requires_grad", "is_cuda", "is_cpu", "layout", "is_leaf",
    "size", "dim", "ndimension", "numel", "nelement", "stride", "is_floating_point", "is_complex",
    "is_contiguous", "element_size", "__len__", "__repr__", "__format__", "__hash__", "grad_fn", "data", "detach",
    "storage_offset",
};

/* torch functions that build a tensor from Python data: run eagerly while tracing (no proxy among
 * their arguments); the tensor they make is then captured as a constant input like a closure tensor. */
static const char *const data_constructors[] = {"tensor", "as_tensor", "from_numpy", "scalar_tensor"};

/* torch callables of Python-side state that torch 2.x routes through the TorchFunctionMode: run
 * eagerly while tracing (no proxy among their arguments). `torch.no_grad()` sets grad mode through
 * torch._C._set_grad_enabled, which the recording then reads (grad_stops); torch.device(...) makes a
 * device object. Dotted paths below `torch`. */
static const char *const state_functions[] = {"device", "_C._set_grad_enabled"};

/* Metadata queries in function form (torch.numel(x)): answered by the proxy's method of that name. */
static const struct { const char *func, *method; } metadata_functions[] = {
    {"numel", "numel"}, {"is_floating_point", "is_floating_point"}, {"is_complex", "is_complex"},
    {"is_nonzero", "item"}, /* data-dependent: raises as item() does */
};
static PyObject *metadata_funcs; /* dict: torch function -> method name */

static int qualname_flags(const char *qualname, unsigned *flags) {
  for (int i = 0; i < th_op_count(); i++)
    if (!strcmp(th_op_qualname(i), qualname)) return *flags = th_op_flags(i), 1;
  return 0;
}

int pyth_dispatch_init(void) {
  if (dispatch) return 0;
  if (!(dispatch = PyDict_New()) || !(methods = PyDict_New()) || !(passthrough = PySet_New(NULL))) goto fail;
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
  for (size_t i = 0; i < sizeof protocol / sizeof *protocol; i++) {
    unsigned fl;
    char alias[64];
    if (!qualname_flags(protocol[i].qualname, &fl)) continue;
    snprintf(alias, sizeof alias, "Tensor.%s", protocol[i].method);
    if (add_alias(alias, protocol[i].qualname, fl, protocol[i].swap) < 0) goto fail;
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
    PyObject *g = PyObject_HasAttrString(f, "__get__") && !PyCallable_Check(f) ? PyObject_GetAttrString(f, "__get__") : Py_NewRef(f);
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
  Py_CLEAR(methods);
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
    if (!m || !strcmp(m, "torch._C._VariableFunctions")) m = "torch";
    else if (!strcmp(m, "torch._C._nn")) m = "torch.nn.functional";
    else if (!strcmp(m, "torch._C._linalg")) m = "torch.linalg";
    else if (!strcmp(m, "torch._C._special")) m = "torch.special";
    else if (!strcmp(m, "torch._C._fft")) m = "torch.fft";
    r = PyUnicode_FromFormat("%s.%s", m, q ? q : "?");
    Py_XDECREF(mod);
  }
  Py_DECREF(qn);
  PyErr_Clear();
  return r;
}

/* torch's random samplers (torch.randn, torch.rand_like, Tensor.normal_, torch.bernoulli, ...): a user
 * who calls one inside a jitted function is told to pass the random tensor in. */
static bool is_random_factory(const char *name) {
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
  if (nargs < 1 || nargs > 4) return PyErr_SetString(PyExc_TypeError, "torch_function(func, types, args, kwargs)"), NULL;
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
    r = op_call_args((pyth_op *)op, fargs, fkw);
  } else if (meta && PyTuple_GET_SIZE(fargs) == 1 && Py_TYPE(PyTuple_GET_ITEM(fargs, 0)) == &pyth_proxy_type) {
    r = PyObject_CallMethodNoArgs(PyTuple_GET_ITEM(fargs, 0), meta);
  } else if (!PyErr_Occurred()) {
    int pt = PySet_Contains(passthrough, func);
    if (pt == 1 && !has_proxy(fargs, 0) && !(fkw && has_proxy(fkw, 0))) {
      r = Py_NewRef(pyth_passthrough_marker); /* the mode runs func eagerly */
    } else if (pt >= 0) {
      PyObject *d = func_display(func);
      const char *name = d ? PyUnicode_AsUTF8(d) : NULL;
      if (name && is_random_factory(name))
        PyErr_Format(PyExc_NotImplementedError,
                     "%U is not supported by thunder_c: random numbers cannot be drawn inside a jitted function "
                     "(draw them outside and pass the tensor in as an argument)",
                     d);
      else if (d)
        PyErr_Format(PyExc_NotImplementedError, "%U is not supported by thunder_c", d);
      Py_XDECREF(d);
    }
  }
  Py_XDECREF(empty);
  return r;
}

/* ---- TensorProxy: metadata ----------------------------------------------------------------------- */

static PyObject *shape_tuple(th_value *v) {
  int nd = th_value_ndim(v);
  PyObject *t = PyTuple_New(nd);
  if (!t) return NULL;
  for (int i = 0; i < nd; i++) {
    PyObject *x = PyLong_FromLongLong(th_value_shape(v)[i]);
    if (!x) return Py_DECREF(t), NULL;
    PyTuple_SET_ITEM(t, i, x);
  }
  return t;
}

static PyObject *proxy_shape(PyObject *o, void *c) {
  (void)c;
  th_value *v = proxy_value(o);
  if (!v) return NULL;
  PyObject *t = shape_tuple(v);
  if (!t) return NULL;
  PyObject *s = PyObject_CallOneArg(pyth_T.size_type, t);
  Py_DECREF(t);
  return s;
}

static PyObject *proxy_dtype(PyObject *o, void *c) {
  (void)c;
  th_value *v = proxy_value(o);
  if (!v) return NULL;
  th_dtype d = th_value_dtype(v);
  return Py_NewRef(pyth_T.dtypes[d] ? pyth_T.dtypes[d] : pyth_dtypes[d]);
}

static PyObject *proxy_device(PyObject *o, void *c) {
  (void)c;
  th_value *v = proxy_value(o);
  return v ? pyth_device_to_torch(th_value_device(v)) : NULL;
}

static PyObject *proxy_ndim(PyObject *o, void *c) {
  (void)c;
  th_value *v = proxy_value(o);
  return v ? PyLong_FromLong(th_value_ndim(v)) : NULL;
}

static PyObject *proxy_false(PyObject *o, void *c) {
  (void)c;
  return proxy_value(o) ? Py_NewRef(Py_False) : NULL;
}

static PyObject *proxy_none(PyObject *o, void *c) {
  (void)c;
  return proxy_value(o) ? Py_NewRef(Py_None) : NULL;
}

static PyObject *proxy_is_cpu(PyObject *o, void *c) {
  (void)c;
  th_value *v = proxy_value(o);
  return v ? PyBool_FromLong(th_value_device(v).type == TH_CPU) : NULL;
}

static PyObject *proxy_is_cuda(PyObject *o, void *c) {
  (void)c;
  th_value *v = proxy_value(o);
  return v ? PyBool_FromLong(th_value_device(v).type == TH_CUDA) : NULL;
}

static PyObject *proxy_name(PyObject *o, void *c) {
  (void)c;
  th_value *v = proxy_value(o);
  if (!v) return NULL;
  const char *n = th_value_name(v);
  return PyUnicode_FromString(n ? n : "");
}

/* isinstance(x, torch.Tensor) and torch.is_tensor(x) see a tensor: user code and torch.nn take the
 * tensor branch, and every op on it is recorded. type(x) stays TensorProxy. */
static PyObject *proxy_class(PyObject *o, void *c) {
  (void)o;
  (void)c;
  return Py_NewRef(pyth_T.tensor_type);
}

static PyObject *proxy_layout(PyObject *o, void *c) {
  (void)c;
  if (!proxy_value(o)) return NULL;
  return PyObject_GetAttrString(pyth_T.torch, "strided");
}

static PyObject *proxy_data(PyObject *o, void *c) {
  (void)c;
  if (!proxy_value(o)) return NULL;
  ((pyth_proxy *)o)->tracer->grad_stops++; /* no gradient flows through: see autograd.c */
  return Py_NewRef(o);
}

/* Records op `qualname` on (self, extra...) */
static PyObject *record_on(PyObject *self, const char *qualname, const char *display, PyObject *extra) {
  unsigned fl = 0;
  qualname_flags(qualname, &fl);
  Py_ssize_t n = extra ? PyTuple_GET_SIZE(extra) : 0;
  PyObject *a = PyTuple_New(n + 1);
  if (!a) return NULL;
  PyTuple_SET_ITEM(a, 0, Py_NewRef(self));
  for (Py_ssize_t i = 0; i < n; i++) PyTuple_SET_ITEM(a, i + 1, Py_NewRef(PyTuple_GET_ITEM(extra, i)));
  PyObject *r = pyth_record(qualname, display, fl, a, NULL);
  Py_DECREF(a);
  return r;
}

static PyObject *proxy_T(PyObject *o, void *c) {
  (void)c;
  th_value *v = proxy_value(o);
  if (!v) return NULL;
  int nd = th_value_ndim(v);
  PyObject *dims = PyTuple_New(nd);
  if (!dims) return NULL;
  for (int i = 0; i < nd; i++) PyTuple_SET_ITEM(dims, i, PyLong_FromLong(nd - 1 - i));
  PyObject *extra = PyTuple_Pack(1, dims);
  Py_DECREF(dims);
  if (!extra) return NULL;
  PyObject *r = record_on(o, "ltorch.permute", "torch.Tensor.T", extra);
  Py_DECREF(extra);
  return r;
}

static PyObject *proxy_mT(PyObject *o, void *c) {
  (void)c;
  PyObject *extra = Py_BuildValue("(ii)", -2, -1);
  if (!extra) return NULL;
  PyObject *r = record_on(o, "ltorch.transpose", "torch.Tensor.mT", extra);
  Py_DECREF(extra);
  return r;
}

static int dim_arg(th_value *v, PyObject *d, int *out) {
  long k = PyLong_AsLong(d);
  if (k == -1 && PyErr_Occurred()) return -1;
  int nd = th_value_ndim(v), n = nd ? nd : 1;
  if (k < -n || k >= n) {
    PyErr_Format(PyExc_IndexError, "Dimension out of range (expected to be in range of [%d, %d], but got %ld)", -n, n - 1, k);
    return -1;
  }
  *out = (int)(k < 0 ? k + n : k);
  return 0;
}

static PyObject *proxy_size(PyObject *o, PyObject *args, PyObject *kw) {
  static char *kwl[] = {"dim", NULL};
  PyObject *d = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:size", kwl, &d)) return NULL;
  th_value *v = proxy_value(o);
  if (!v) return NULL;
  if (d == Py_None) return proxy_shape(o, NULL);
  int k;
  if (dim_arg(v, d, &k) < 0) return NULL;
  return PyLong_FromLongLong(th_value_ndim(v) ? th_value_shape(v)[k] : 1);
}

static PyObject *proxy_storage_offset(PyObject *o, PyObject *unused) {
  (void)unused;
  return proxy_value(o) ? PyLong_FromLong(0) : NULL;
}

static PyObject *proxy_stride(PyObject *o, PyObject *args, PyObject *kw) {
  static char *kwl[] = {"dim", NULL};
  PyObject *d = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:stride", kwl, &d)) return NULL;
  th_value *v = proxy_value(o);
  if (!v) return NULL;
  int nd = th_value_ndim(v);
  int64_t st[TH_MAX_DIMS], acc = 1;
  for (int i = nd - 1; i >= 0; i--) {
    st[i] = acc;
    acc *= th_value_shape(v)[i] > 1 ? th_value_shape(v)[i] : 1;
  }
  if (d != Py_None) {
    int k;
    if (dim_arg(v, d, &k) < 0) return NULL;
    return PyLong_FromLongLong(nd ? st[k] : 1);
  }
  PyObject *t = PyTuple_New(nd);
  if (!t) return NULL;
  for (int i = 0; i < nd; i++) PyTuple_SET_ITEM(t, i, PyLong_FromLongLong(st[i]));
  return t;
}

static PyObject *proxy_dim(PyObject *o, PyObject *unused) {
  (void)unused;
  return proxy_ndim(o, NULL);
}

static PyObject *proxy_numel(PyObject *o, PyObject *unused) {
  (void)unused;
  th_value *v = proxy_value(o);
  return v ? PyLong_FromLongLong(th_value_numel(v)) : NULL;
}

static PyObject *proxy_element_size(PyObject *o, PyObject *unused) {
  (void)unused;
  th_value *v = proxy_value(o);
  return v ? PyLong_FromSize_t(th_dtype_size(th_value_dtype(v))) : NULL;
}

static PyObject *proxy_is_floating_point(PyObject *o, PyObject *unused) {
  (void)unused;
  th_value *v = proxy_value(o);
  return v ? PyBool_FromLong(th_dtype_is_float(th_value_dtype(v))) : NULL;
}

static PyObject *proxy_true(PyObject *o, PyObject *args, PyObject *kw) {
  (void)args;
  (void)kw;
  return proxy_value(o) ? Py_NewRef(Py_True) : NULL;
}

static PyObject *proxy_false_m(PyObject *o, PyObject *unused) {
  (void)unused;
  return proxy_value(o) ? Py_NewRef(Py_False) : NULL;
}

/* detach() and cpu() on a CPU proxy: the tensor itself (no autograd graph is recorded yet). */
static PyObject *proxy_self(PyObject *o, PyObject *args, PyObject *kw) {
  (void)args;
  (void)kw;
  th_value *v = proxy_value(o);
  if (!v) return NULL;
  return Py_NewRef(o);
}

/* detach(): the tensor itself, noted as a point where gradients stop (autograd.c refuses it). */
static PyObject *proxy_detach(PyObject *o, PyObject *args, PyObject *kw) {
  PyObject *r = proxy_self(o, args, kw);
  if (r) ((pyth_proxy *)o)->tracer->grad_stops++;
  return r;
}

static PyObject *data_dependent(PyObject *o, const char *what) {
  th_value *v = proxy_value(o);
  if (!v) return NULL;
  return PyErr_Format(PyExc_NotImplementedError,
                      "thunder_c: %s needs the values of tensor %s, which are not known while tracing "
                      "(data-dependent Python control flow is not supported)", what, th_value_name(v)), NULL;
}

static PyObject *proxy_item(PyObject *o, PyObject *u) { (void)u; return data_dependent(o, "Tensor.item()"); }
static PyObject *proxy_tolist(PyObject *o, PyObject *u) { (void)u; return data_dependent(o, "Tensor.tolist()"); }
static PyObject *proxy_numpy(PyObject *o, PyObject *u) { (void)u; return data_dependent(o, "Tensor.numpy()"); }
static PyObject *proxy_data_ptr(PyObject *o, PyObject *u) { (void)u; return data_dependent(o, "Tensor.data_ptr()"); }

static PyObject *proxy_tf(PyObject *cls, PyObject *const *args, Py_ssize_t nargs) {
  (void)cls;
  return pyth_torch_function(NULL, args, nargs);
}

static PyMethodDef proxy_methods[] = {
    {"size", (PyCFunction)(void (*)(void))proxy_size, METH_VARARGS | METH_KEYWORDS, "Shape (torch.Size), or one extent."},
    {"stride", (PyCFunction)(void (*)(void))proxy_stride, METH_VARARGS | METH_KEYWORDS, "Strides of a contiguous tensor of this shape."},
    {"dim", proxy_dim, METH_NOARGS, "Number of dimensions."},
    {"ndimension", proxy_dim, METH_NOARGS, "Number of dimensions."},
    {"numel", proxy_numel, METH_NOARGS, "Number of elements."},
    {"nelement", proxy_numel, METH_NOARGS, "Number of elements."},
    {"element_size", proxy_element_size, METH_NOARGS, "Bytes per element."},
    {"is_floating_point", proxy_is_floating_point, METH_NOARGS, "True for floating dtypes."},
    {"is_complex", proxy_false_m, METH_NOARGS, "False: thunder_c has no complex dtypes."},
    {"is_contiguous", (PyCFunction)(void (*)(void))proxy_true, METH_VARARGS | METH_KEYWORDS, "True: proxies are contiguous."},
    {"storage_offset", proxy_storage_offset, METH_NOARGS, "0: proxies are contiguous tensors of their own."},
    {"detach", (PyCFunction)(void (*)(void))proxy_detach, METH_VARARGS | METH_KEYWORDS, "The tensor itself (no autograd graph is recorded)."},
    {"cpu", (PyCFunction)(void (*)(void))proxy_self, METH_VARARGS | METH_KEYWORDS, "The tensor itself (proxies are on the CPU)."},
    {"item", proxy_item, METH_NOARGS, "Not available while tracing (data-dependent)."},
    {"tolist", proxy_tolist, METH_NOARGS, "Not available while tracing (data-dependent)."},
    {"numpy", proxy_numpy, METH_NOARGS, "Not available while tracing (data-dependent)."},
    {"data_ptr", proxy_data_ptr, METH_NOARGS, "Not available while tracing."},
    {"__torch_function__", (PyCFunction)(void (*)(void))proxy_tf, METH_FASTCALL | METH_CLASS, "Routes torch calls to the tracer."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef proxy_getset[] = {
    {"shape", proxy_shape, NULL, "torch.Size", NULL},
    {"dtype", proxy_dtype, NULL, "torch dtype", NULL},
    {"device", proxy_device, NULL, "torch device", NULL},
    {"ndim", proxy_ndim, NULL, "number of dimensions", NULL},
    {"requires_grad", proxy_false, NULL, "False: autograd is not recorded yet", NULL},
    {"grad", proxy_none, NULL, "None: autograd is not recorded yet", NULL},
    {"is_cuda", proxy_is_cuda, NULL, "on a CUDA device", NULL},
    {"is_cpu", proxy_is_cpu, NULL, "on the CPU", NULL},
    {"is_sparse", proxy_false, NULL, "False", NULL},
    {"is_quantized", proxy_false, NULL, "False", NULL},
    {"T", proxy_T, NULL, "dimensions reversed", NULL},
    {"mT", proxy_mT, NULL, "last two dimensions swapped", NULL},
    {"name", proxy_name, NULL, "the proxy's name in the trace", NULL},
    {"__class__", proxy_class, NULL, "torch.Tensor: isinstance(x, torch.Tensor) holds while tracing", NULL},
    {"is_nested", proxy_false, NULL, "False", NULL},
    {"is_mkldnn", proxy_false, NULL, "False", NULL},
    {"is_meta", proxy_false, NULL, "False", NULL},
    {"layout", proxy_layout, NULL, "torch.strided", NULL},
    {"data", proxy_data, NULL, "the tensor itself (no autograd graph is recorded)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

/* Other attributes: a Tensor method of the op table (bound to this proxy); a torch.Tensor attribute
 * thunder_c does not support raises NotImplementedError naming it when called; anything else is an
 * AttributeError. */
static PyObject *unsupported_call(PyObject *self, PyObject *args, PyObject *kw) {
  (void)args;
  (void)kw;
  const char *name = PyUnicode_AsUTF8(self);
  if (name && is_random_factory(name))
    return PyErr_Format(PyExc_NotImplementedError,
                        "%U is not supported by thunder_c: random numbers cannot be drawn inside a jitted function "
                        "(draw them outside and pass the tensor in as an argument)",
                        self);
  return PyErr_Format(PyExc_NotImplementedError, "%U is not supported by thunder_c", self);
}
static PyMethodDef unsupported_def = {"unsupported", (PyCFunction)(void (*)(void))unsupported_call, METH_VARARGS | METH_KEYWORDS, NULL};

static PyObject *proxy_getattro(PyObject *o, PyObject *name) {
  PyObject *r = PyObject_GenericGetAttr(o, name);
  if (r || !PyErr_ExceptionMatches(PyExc_AttributeError)) return r;
  PyErr_Clear();
  if (pyth_dispatch_init() < 0) return NULL;
  PyObject *op = PyDict_GetItemWithError(methods, name);
  if (op) {
    pyth_op *m = (pyth_op *)op;
    return pyth_op_new(PyUnicode_AsUTF8(m->qualname), PyUnicode_AsUTF8(m->display), m->flags, m->swap, o);
  }
  if (PyErr_Occurred()) return NULL;
  PyObject *attr = PyObject_GetAttr(pyth_T.tensor_type, name);
  if (attr) {
    bool callable = PyCallable_Check(attr);
    Py_DECREF(attr);
    PyObject *disp = PyUnicode_FromFormat("torch.Tensor.%U", name);
    if (!disp) return NULL;
    if (callable) {
      PyObject *f = PyCFunction_New(&unsupported_def, disp);
      Py_DECREF(disp);
      return f;
    }
    PyErr_Format(PyExc_AttributeError, "%U is not supported by thunder_c", disp);
    Py_DECREF(disp);
    return NULL;
  }
  PyErr_Clear();
  return PyErr_Format(PyExc_AttributeError, "'TensorProxy' object has no attribute '%U'", name), NULL;
}

/* ---- TensorProxy: operators ---------------------------------------------------------------------- */

static PyObject *binary(const char *qualname, const char *display, PyObject *a, PyObject *b) {
  unsigned fl = 0;
  qualname_flags(qualname, &fl);
  PyObject *args = PyTuple_Pack(2, a, b);
  if (!args) return NULL;
  PyObject *r = pyth_record(qualname, display, fl, args, NULL);
  Py_DECREF(args);
  return r;
}

static PyObject *unary(const char *qualname, const char *display, PyObject *a) {
  unsigned fl = 0;
  qualname_flags(qualname, &fl);
  PyObject *args = PyTuple_Pack(1, a);
  if (!args) return NULL;
  PyObject *r = pyth_record(qualname, display, fl, args, NULL);
  Py_DECREF(args);
  return r;
}

/* In-place operators: the op the table maps Tensor.__iadd__ (...) to. */
static PyObject *inplace(const char *dunder, PyObject *a, PyObject *b) {
  if (pyth_dispatch_init() < 0) return NULL;
  pyth_op *op = (pyth_op *)PyDict_GetItemString(methods, dunder);
  if (!op) return PyErr_Format(PyExc_NotImplementedError, "torch.Tensor.%s is not supported by thunder_c", dunder), NULL;
  PyObject *args = PyTuple_Pack(2, a, b);
  if (!args) return NULL;
  PyObject *r = op_call_args(op, args, NULL);
  Py_DECREF(args);
  return r;
}

#define BIN(fn, q, d) static PyObject *fn(PyObject *a, PyObject *b) { return binary(q, d, a, b); }
BIN(nb_add, "ltorch.add", "torch.Tensor.__add__")
BIN(nb_sub, "ltorch.sub", "torch.Tensor.__sub__")
BIN(nb_mul, "ltorch.mul", "torch.Tensor.__mul__")
BIN(nb_truediv, "ltorch.true_divide", "torch.Tensor.__truediv__")
BIN(nb_floordiv, "ltorch.floor_divide", "torch.Tensor.__floordiv__")
BIN(nb_mod, "ltorch.remainder", "torch.Tensor.__mod__")
BIN(nb_and, "ltorch.bitwise_and", "torch.Tensor.__and__")
BIN(nb_or, "ltorch.bitwise_or", "torch.Tensor.__or__")
BIN(nb_xor, "ltorch.bitwise_xor", "torch.Tensor.__xor__")
BIN(nb_matmul, "ltorch.matmul", "torch.Tensor.__matmul__")
#undef BIN
#define IBIN(fn, d) static PyObject *fn(PyObject *a, PyObject *b) { return inplace(d, a, b); }
IBIN(nb_iadd, "__iadd__")
IBIN(nb_isub, "__isub__")
IBIN(nb_imul, "__imul__")
IBIN(nb_itruediv, "__itruediv__")
IBIN(nb_ifloordiv, "__ifloordiv__")
IBIN(nb_imod, "__imod__")
IBIN(nb_iand, "__iand__")
IBIN(nb_ior, "__ior__")
IBIN(nb_ixor, "__ixor__")
#undef IBIN

static PyObject *nb_pow(PyObject *a, PyObject *b, PyObject *m) {
  if (m != Py_None) return PyErr_SetString(PyExc_TypeError, "pow() with a modulus is not supported for tensors"), NULL;
  return binary("ltorch.pow", "torch.Tensor.__pow__", a, b);
}
static PyObject *nb_ipow(PyObject *a, PyObject *b, PyObject *m) {
  if (m != Py_None) return PyErr_SetString(PyExc_TypeError, "pow() with a modulus is not supported for tensors"), NULL;
  return inplace("__ipow__", a, b);
}
static PyObject *nb_neg(PyObject *a) { return unary("ltorch.neg", "torch.Tensor.__neg__", a); }
static PyObject *nb_abs(PyObject *a) { return unary("ltorch.abs", "torch.Tensor.__abs__", a); }
static PyObject *nb_invert(PyObject *a) { return unary("ltorch.bitwise_not", "torch.Tensor.__invert__", a); }
static PyObject *nb_pos(PyObject *a) { return proxy_value(a) ? Py_NewRef(a) : NULL; }
static int nb_bool(PyObject *a) { data_dependent(a, "bool(tensor)"); return -1; }
static PyObject *nb_int(PyObject *a) { return data_dependent(a, "int(tensor)"); }
static PyObject *nb_float(PyObject *a) { return data_dependent(a, "float(tensor)"); }

static PyNumberMethods proxy_number = {
    .nb_add = nb_add, .nb_subtract = nb_sub, .nb_multiply = nb_mul, .nb_remainder = nb_mod,
    .nb_power = nb_pow, .nb_negative = nb_neg, .nb_positive = nb_pos, .nb_absolute = nb_abs,
    .nb_bool = nb_bool, .nb_invert = nb_invert, .nb_and = nb_and, .nb_xor = nb_xor, .nb_or = nb_or,
    .nb_int = nb_int, .nb_float = nb_float, .nb_inplace_add = nb_iadd, .nb_inplace_subtract = nb_isub,
    .nb_inplace_multiply = nb_imul, .nb_inplace_remainder = nb_imod, .nb_inplace_power = nb_ipow,
    .nb_inplace_and = nb_iand, .nb_inplace_xor = nb_ixor, .nb_inplace_or = nb_ior,
    .nb_floor_divide = nb_floordiv, .nb_true_divide = nb_truediv, .nb_inplace_floor_divide = nb_ifloordiv,
    .nb_inplace_true_divide = nb_itruediv, .nb_index = nb_int, .nb_matrix_multiply = nb_matmul,
};

static PyObject *proxy_richcompare(PyObject *a, PyObject *b, int op) {
  static const char *const q[] = {"ltorch.lt", "ltorch.le", "ltorch.eq", "ltorch.ne", "ltorch.gt", "ltorch.ge"};
  static const char *const d[] = {"torch.Tensor.__lt__", "torch.Tensor.__le__", "torch.Tensor.__eq__",
                                  "torch.Tensor.__ne__", "torch.Tensor.__gt__", "torch.Tensor.__ge__"};
  if (Py_TYPE(a) != &pyth_proxy_type && !PyObject_TypeCheck(b, &pyth_proxy_type)) Py_RETURN_NOTIMPLEMENTED;
  return binary(q[op], d[op], a, b);
}

static PyObject *proxy_subscript(PyObject *a, PyObject *key) { return binary("ltorch.getitem", "torch.Tensor.__getitem__", a, key); }

/* x[key] = v: the view x[key] updated in place (copy_ of a tensor, fill_ of a number); x and its other
 * aliases then read the update (see "aliasing" above). */
static int proxy_ass_subscript(PyObject *a, PyObject *key, PyObject *v) {
  if (!proxy_value(a)) return -1;
  if (!v) return PyErr_SetString(PyExc_TypeError, "tensors do not support item deletion"), -1;
  PyObject *view = proxy_subscript(a, key);
  if (!view) return -1;
  bool tensor = Py_TYPE(v) == &pyth_proxy_type || PyObject_TypeCheck(v, (PyTypeObject *)pyth_T.tensor_type);
  PyObject *r = binary(tensor ? "ltorch.copy_" : "ltorch.fill_", "torch.Tensor.__setitem__", view, v);
  Py_DECREF(view);
  Py_XDECREF(r);
  return r ? 0 : -1;
}

static Py_ssize_t proxy_len(PyObject *a) {
  th_value *v = proxy_value(a);
  if (!v) return -1;
  if (th_value_ndim(v) == 0) return PyErr_SetString(PyExc_TypeError, "len() of a 0-d tensor"), -1;
  return (Py_ssize_t)th_value_shape(v)[0];
}

static PyMappingMethods proxy_mapping = {.mp_length = proxy_len, .mp_subscript = proxy_subscript,
                                         .mp_ass_subscript = proxy_ass_subscript};

/* iter(t): t[0], t[1], ... as PyTorch (unbind along dim 0). */
static PyObject *proxy_iter(PyObject *a) {
  Py_ssize_t n = proxy_len(a);
  if (n < 0) {
    if (PyErr_ExceptionMatches(PyExc_TypeError)) {
      PyErr_Clear();
      PyErr_SetString(PyExc_TypeError, "iteration over a 0-d tensor");
    }
    return NULL;
  }
  PyObject *l = PyList_New(n);
  if (!l) return NULL;
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *k = PyLong_FromSsize_t(i);
    PyObject *x = k ? proxy_subscript(a, k) : NULL;
    Py_XDECREF(k);
    if (!x) return Py_DECREF(l), NULL;
    PyList_SET_ITEM(l, i, x);
  }
  PyObject *it = PyObject_GetIter(l);
  Py_DECREF(l);
  return it;
}

static Py_hash_t proxy_hash(PyObject *a) { return _Py_HashPointer(a); }

PyTypeObject pyth_proxy_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "thunder_c.TensorProxy",
    .tp_basicsize = sizeof(pyth_proxy),
    .tp_dealloc = proxy_dealloc,
    .tp_repr = proxy_repr,
    .tp_as_number = &proxy_number,
    .tp_as_mapping = &proxy_mapping,
    .tp_hash = proxy_hash,
    .tp_getattro = proxy_getattro,
    .tp_richcompare = proxy_richcompare,
    .tp_iter = proxy_iter,
    .tp_methods = proxy_methods,
    .tp_getset = proxy_getset,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A tensor while thunder_c.jit traces a function: its shape, dtype and device are known, "
              "its values are not. Every op on it is recorded in the trace.",
};
