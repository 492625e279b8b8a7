/* transforms.c — the transforms from Python: thunder_c.autocast(fn_or_trace, dtype) and
 * thunder_c.transforms.* on Trace objects.
 *
 * autocast(trace, dtype) is the core's function transform (th_transform_autocast). autocast(fn, dtype)
 * wraps a function: when it runs under thunder_c.jit, its ops are recorded inside a cpu and a cuda
 * autocast region of `dtype` (th_trace_autocast_push), which gives the same trace as the function
 * transform and as `torch.autocast` around the call. The other transforms (dce, cse, del_last_used)
 * take a Trace and return a new one. float8 is the core's float8 transform with a Python filter, and
 * the float8 regions that convert chosen linears of a trace being recorded. */
#include <string.h>

#include "pyth.h"

typedef struct {
  PyObject_HEAD PyObject *fn;
  th_dtype dtype;
} pyth_autocast_fn;

static void acf_dealloc(PyObject *o) {
  Py_XDECREF(((pyth_autocast_fn *)o)->fn);
  PyObject_Free(o);
}

static PyObject *acf_call(PyObject *o, PyObject *args, PyObject *kw) {
  pyth_autocast_fn *a = (pyth_autocast_fn *)o;
  pyth_tracer *tr = pyth_active;
  if (!tr)
    return PyErr_Format(PyExc_RuntimeError,
                        "thunder_c.autocast(fn, dtype) runs under thunder_c.jit: call thunder_c.jit(autocast(fn, %s))",
                        th_dtype_name(a->dtype)),
           NULL;
  /* fixed regions for the duration of the call, whatever torch's own state says */
  pyth_autocast_clear(tr);
  th_status st = th_trace_autocast_push(tr->trace, TH_CPU, a->dtype, true);
  if (st == TH_OK && (st = th_trace_autocast_push(tr->trace, TH_CUDA, a->dtype, true)) != TH_OK)
    th_trace_autocast_pop(tr->trace);
  if (st != TH_OK) return pyth_raise(st);
  tr->autocast_forced++;
  PyObject *r = PyObject_Call(a->fn, args, kw);
  tr->autocast_forced--;
  th_trace_autocast_pop(tr->trace);
  th_trace_autocast_pop(tr->trace);
  return r;
}

static PyObject *acf_wrapped(PyObject *o, void *c) {
  (void)c;
  return Py_NewRef(((pyth_autocast_fn *)o)->fn);
}

static PyObject *acf_repr(PyObject *o) {
  pyth_autocast_fn *a = (pyth_autocast_fn *)o;
  return PyUnicode_FromFormat("<thunder_c.autocast(%R, thunder_c.%s)>", a->fn, th_dtype_name(a->dtype));
}

static PyGetSetDef acf_getset[] = {
  {"__wrapped__", acf_wrapped, NULL, "the function autocast wraps", NULL},
  {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject pyth_autocast_type = {
  PyVarObject_HEAD_INIT(NULL, 0).tp_name = "thunder_c.AutocastFunction",
  .tp_basicsize = sizeof(pyth_autocast_fn),
  .tp_dealloc = acf_dealloc,
  .tp_call = acf_call,
  .tp_repr = acf_repr,
  .tp_getset = acf_getset,
  .tp_flags = Py_TPFLAGS_DEFAULT,
  .tp_doc = "A function whose ops are recorded under autocast when it runs under thunder_c.jit.",
};

PyObject *pyth_autocast_inner(PyObject *o) {
  return Py_TYPE(o) == &pyth_autocast_type ? ((pyth_autocast_fn *)o)->fn : NULL;
}

/* A new Trace owning `tr` (NULL: raise the core's error). */
static PyObject *own(th_status st, th_trace *tr) {
  if (st != TH_OK) return pyth_raise(st);
  PyObject *owner = pyth_trace_owner_new(tr);
  if (!owner) return NULL;
  PyObject *r = pyth_trace_wrap(tr, owner);
  Py_DECREF(owner);
  return r;
}

static PyObject *m_autocast(PyObject *self, PyObject *args, PyObject *kw) {
  (void)self;
  static char *kwl[] = {"fn", "dtype", NULL};
  PyObject *fn, *dt;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "OO:autocast", kwl, &fn, &dt)) return NULL;
  th_dtype dtype = TH_DTYPE_COUNT;
  /* as Thunder's autocast: its own dtypes only (thunder_c.bfloat16, not torch.bfloat16) */
  if (Py_TYPE(dt) != &pyth_dtype_type || !pyth_dtype_from(dt, &dtype) || (dtype != TH_BF16 && dtype != TH_F16)) {
    PyObject *r = PyObject_Repr(dt);
    PyErr_Format(PyExc_ValueError,
                 "autocast: `dtype` is expected to be either thunder_c.float16 or thunder_c.bfloat16, but %U", r);
    Py_XDECREF(r);
    return NULL;
  }
  const th_trace *t = pyth_trace_get(fn);
  if (t) {
    th_trace *out = NULL;
    th_status st = th_transform_autocast(t, dtype, &out);
    return own(st, out);
  }
  if (!PyCallable_Check(fn))
    return PyErr_Format(PyExc_TypeError, "autocast: expected a function or a Trace, got %s", Py_TYPE(fn)->tp_name),
           NULL;
  pyth_autocast_fn *a = PyObject_New(pyth_autocast_fn, &pyth_autocast_type);
  if (!a) return NULL;
  a->fn = Py_NewRef(fn);
  a->dtype = dtype;
  return (PyObject *)a;
}

static PyObject *one_trace(PyObject *arg, const char *what, th_status (*f)(const th_trace *, th_trace **)) {
  const th_trace *t = pyth_trace_get(arg);
  if (!t)
    return PyErr_Format(PyExc_TypeError, "%s: expected a thunder_c.Trace, got %s", what, Py_TYPE(arg)->tp_name), NULL;
  th_trace *out = NULL;
  th_status st = f(t, &out);
  return own(st, out);
}

static PyObject *m_dce(PyObject *self, PyObject *arg) {
  (void)self;
  return one_trace(arg, "dce", th_transform_dce);
}
static PyObject *m_cse(PyObject *self, PyObject *arg) {
  (void)self;
  return one_trace(arg, "cse", th_transform_cse);
}
static PyObject *m_dlu(PyObject *self, PyObject *arg) {
  (void)self;
  return one_trace(arg, "del_last_used", th_transform_del_last_used);
}

/* ---- float8 ------------------------------------------------------------------------------------------
 * thunder_c.transforms.float8(trace, filter=None, input_dtype=None, weight_dtype=None) and the jit option
 * float8=True | {...}: th_transform_float8 with a Python filter. The filter gets one dict per eligible
 * linear: {"index", "op", "input", "weight", "bias" (trace names; bias None), "input_shape",
 * "weight_shape" (tuples), "dtype" (thunder_c dtype), "weight_param" and "module" (the parameter's
 * qualified name "fc1.weight" and its module "fc1" when the weight is a parameter of the jitted
 * module, else None)}, and returns whether to convert it. */

void pyth_float8_clear(pyth_float8 *f) {
  Py_CLEAR(f->filter);
  Py_CLEAR(f->param_names);
  Py_CLEAR(f->only);
  f->enabled = false;
}

/* thunder_c.float8_e4m3fn / float8_e5m2, or their names ("float8_e4m3fn", "f8_e4m3fn", "e4m3fn"). */
static int fp8_dtype_arg(PyObject *o, const char *who, const char *what, th_dtype *out) {
  if (!o || o == Py_None) return 0;
  th_dtype dt = TH_DTYPE_COUNT;
  bool ok = pyth_dtype_from(o, &dt);
  if (!ok && PyUnicode_Check(o)) {
    const char *s = PyUnicode_AsUTF8(o);
    if (!s) return -1;
    if (!strcmp(s, "e4m3fn"))
      dt = TH_F8E4M3FN, ok = true;
    else if (!strcmp(s, "e5m2"))
      dt = TH_F8E5M2, ok = true;
    else
      ok = th_dtype_parse(s, &dt);
  }
  if (!ok || !th_dtype_is_fp8(dt)) {
    PyObject *r = PyObject_Repr(o);
    PyErr_Format(PyExc_ValueError, "%s: %s must be thunder_c.float8_e4m3fn or thunder_c.float8_e5m2, but got %U", who,
                 what, r);
    Py_XDECREF(r);
    return -1;
  }
  *out = dt;
  return 0;
}

int pyth_float8_parse(PyObject *spec, pyth_float8 *out, const char *who) {
  out->enabled = false;
  out->opts = th_float8_options_default();
  out->filter = out->param_names = out->only = NULL;
  out->only_index = 0;
  if (!spec || spec == Py_None || spec == Py_False) return 0;
  out->enabled = true;
  if (spec == Py_True) return 0;
  if (!PyDict_Check(spec)) {
    PyErr_Format(PyExc_TypeError,
                 "%s: float8 must be True, False, None or a dict of options (filter, input_dtype, "
                 "weight_dtype), got %s",
                 who, Py_TYPE(spec)->tp_name);
    goto bad;
  }
  PyObject *k, *v;
  Py_ssize_t pos = 0;
  while (PyDict_Next(spec, &pos, &k, &v)) {
    const char *key = PyUnicode_Check(k) ? PyUnicode_AsUTF8(k) : NULL;
    if (key && !strcmp(key, "filter")) {
      if (v != Py_None && !PyCallable_Check(v)) {
        PyErr_Format(PyExc_TypeError, "%s: float8 filter must be callable or None, got %s", who, Py_TYPE(v)->tp_name);
        goto bad;
      }
      Py_XSETREF(out->filter, v == Py_None ? NULL : Py_NewRef(v));
    } else if (key && !strcmp(key, "input_dtype")) {
      if (fp8_dtype_arg(v, who, "input_dtype", &out->opts.input_dtype) < 0) goto bad;
    } else if (key && !strcmp(key, "weight_dtype")) {
      if (fp8_dtype_arg(v, who, "weight_dtype", &out->opts.weight_dtype) < 0) goto bad;
    } else {
      PyErr_Format(PyExc_TypeError, "%s: unknown float8 option %R (expected filter, input_dtype, weight_dtype)", who,
                   k);
      goto bad;
    }
  }
  if (out->opts.input_dtype == TH_F8E5M2 && out->opts.weight_dtype == TH_F8E5M2) {
    PyErr_Format(PyExc_ValueError,
                 "%s: float8 input_dtype and weight_dtype cannot both be float8_e5m2 (_scaled_mm "
                 "refuses two e5m2 operands, as PyTorch and cuBLASLt do)",
                 who);
    goto bad;
  }
  return 0;
bad:
  pyth_float8_clear(out);
  return -1;
}

static PyObject *shape_tuple(const th_value *v) {
  PyObject *t = PyTuple_New(th_value_ndim(v));
  for (int d = 0; t && d < th_value_ndim(v); d++) {
    PyObject *x = PyLong_FromLongLong((long long)th_value_shape(v)[d]);
    if (!x) return Py_DECREF(t), NULL;
    PyTuple_SET_ITEM(t, d, x);
  }
  return t;
}

static PyObject *name_or_none(const th_arg *a) {
  if (a->kind != TH_ARG_VALUE || !th_value_name(a->u.value)) return Py_NewRef(Py_None);
  return PyUnicode_FromString(th_value_name(a->u.value));
}

static int info_set(PyObject *d, const char *k, PyObject *v) {
  if (!v) return -1;
  int rc = PyDict_SetItemString(d, k, v);
  Py_DECREF(v);
  return rc;
}

/* The core's filter callback: a linear outside f->only is left alone; else builds the info dict and
 * calls the Python filter (when there is one). A Python exception stays set (the caller re-raises it)
 * and aborts the transform. */
static th_status py_filter(const th_bsym *b, int index, void *ctx, bool *convert) {
  pyth_float8 *f = ctx;
  th_arg x = th_bsym_arg(b, 0), w = th_bsym_arg(b, 1), bias = th_bsym_arg(b, 2);
  if (f->only) {
    th_arg y = th_bsym_output(b);
    PyObject *key = y.kind == TH_ARG_VALUE ? PyLong_FromVoidPtr(y.u.value) : NULL;
    int in = key ? PySet_Contains(f->only, key) : -1;
    Py_XDECREF(key);
    if (in < 0) return th_set_error(TH_ERR_RUNTIME, "float8: a marked linear could not be looked up");
    if (!in) return *convert = false, TH_OK;
    index = f->only_index++;
    if (!f->filter) return *convert = true, TH_OK;
  }
  PyObject *d = PyDict_New();
  int rc = d ? 0 : -1;
  if (rc == 0) rc = info_set(d, "index", PyLong_FromLong(index));
  if (rc == 0) rc = info_set(d, "op", PyUnicode_FromString(th_bsym_qualname(b)));
  if (rc == 0) rc = info_set(d, "input", name_or_none(&x));
  if (rc == 0) rc = info_set(d, "weight", name_or_none(&w));
  if (rc == 0) rc = info_set(d, "bias", name_or_none(&bias));
  if (rc == 0) rc = info_set(d, "input_shape", shape_tuple(x.u.value));
  if (rc == 0) rc = info_set(d, "weight_shape", shape_tuple(w.u.value));
  if (rc == 0) rc = info_set(d, "dtype", Py_NewRef(pyth_dtypes[th_value_dtype(x.u.value)]));
  PyObject *param = NULL;
  if (rc == 0 && f->param_names && th_value_name(w.u.value)) {
    param = PyDict_GetItemString(f->param_names, th_value_name(w.u.value)); /* borrowed */
  }
  if (rc == 0) rc = info_set(d, "weight_param", Py_NewRef(param ? param : Py_None));
  if (rc == 0) {
    PyObject *mod = Py_NewRef(Py_None);
    if (param && PyUnicode_Check(param)) {
      Py_ssize_t n = PyUnicode_GetLength(param), dot = PyUnicode_FindChar(param, '.', 0, n, -1);
      if (dot >= 0)
        Py_SETREF(mod, PyUnicode_Substring(param, 0, dot));
      else
        Py_SETREF(mod, PyUnicode_FromString(""));
    }
    rc = info_set(d, "module", mod);
  }
  PyObject *r = rc == 0 ? PyObject_CallOneArg(f->filter, d) : NULL;
  Py_XDECREF(d);
  int truth = r ? PyObject_IsTrue(r) : -1;
  Py_XDECREF(r);
  if (truth < 0) return th_set_error(TH_ERR_RUNTIME, "float8: the filter raised an exception");
  *convert = truth;
  return TH_OK;
}

int pyth_float8_apply(pyth_float8 *f, const th_trace *tr, th_trace **out) {
  th_float8_options o = f->opts;
  f->only_index = 0;
  if (f->filter || f->only) {
    o.filter = py_filter;
    o.filter_ctx = f;
  }
  *out = NULL;
  th_status st = th_transform_float8(tr, &o, out);
  if (st == TH_OK) return 0;
  if (!PyErr_Occurred()) pyth_raise(st);
  return -1;
}

/* ---- float8 regions (pyth.h): marks kept on the tracer as (output value address, input_dtype,
 * weight_dtype, filter or None) tuples ---------------------------------------------------------------- */

/* A top-level linear th_transform_float8 converts (float8.c's rule): ltorch.linear / prims.linear with
 * a non-empty input [..., K] and weight [N, K] of one dtype float32, bfloat16 or float16. *linear tells
 * whether b is a linear at all. */
static bool float8_eligible(const th_bsym *b, bool *linear) {
  const char *q = th_bsym_qualname(b);
  *linear = !strcmp(q, "ltorch.linear") || !strcmp(q, "prims.linear");
  if (!*linear || th_bsym_num_args(b) < 3 || th_bsym_output(b).kind != TH_ARG_VALUE) return false;
  th_arg x = th_bsym_arg(b, 0), w = th_bsym_arg(b, 1);
  if (x.kind != TH_ARG_VALUE || w.kind != TH_ARG_VALUE || !th_value_is_tensor(x.u.value) ||
      !th_value_is_tensor(w.u.value))
    return false;
  th_dtype dt = th_value_dtype(x.u.value);
  return th_value_ndim(x.u.value) >= 1 && th_value_ndim(w.u.value) == 2 && dt == th_value_dtype(w.u.value) &&
         (dt == TH_F32 || dt == TH_BF16 || dt == TH_F16) && th_value_numel(x.u.value) > 0 &&
         th_value_numel(w.u.value) > 0;
}

int pyth_float8_mark_region(pyth_tracer *tr, int start, th_dtype in, th_dtype w, PyObject *filter, const char *who,
                            bool strict) {
  if (!tr->float8_marks && !(tr->float8_marks = PyList_New(0))) return -1;
  int n = th_trace_num_bsyms(tr->trace), found = 0, other = 0;
  for (int i = start < 0 ? 0 : start; i < n; i++) {
    const th_bsym *b = th_trace_bsym(tr->trace, i);
    bool linear;
    if (!float8_eligible(b, &linear)) {
      other += linear;
      continue;
    }
    found++;
    PyObject *m = Py_BuildValue("(NiiO)", PyLong_FromVoidPtr(th_bsym_output(b).u.value), (int)in, (int)w,
                                filter ? filter : Py_None);
    if (!m || PyList_Append(tr->float8_marks, m) < 0) return Py_XDECREF(m), -1;
    Py_DECREF(m);
  }
  if (strict && (found != 1 || other)) {
    PyErr_Format(PyExc_NotImplementedError,
                 "thunder_c: %s: float8 needs one linear whose input and weight are float32, bfloat16 or float16 "
                 "tensors of one dtype and not empty, but its forward recorded %d such linears and %d others",
                 who, found, other);
    return -1;
  }
  return 0;
}

int pyth_float8_apply_marks(pyth_tracer *tr, const th_trace *in, PyObject *param_names, th_trace **out) {
  *out = NULL;
  PyObject *marks = tr->float8_marks;
  if (!marks || PyList_GET_SIZE(marks) == 0) return 0;
  Py_ssize_t n = PyList_GET_SIZE(marks);
  char *done = PyMem_Calloc((size_t)n, 1);
  if (!done) return PyErr_NoMemory(), -1;
  const th_trace *cur = in;
  th_trace *mine = NULL; /* cur when this function made it */
  int rc = 0;
  for (Py_ssize_t g = 0; rc == 0 && g < n; g++) { /* one pass per group: the first undone mark's options */
    if (done[g]) continue;
    PyObject *mg = PyList_GET_ITEM(marks, g);
    long gi = PyLong_AsLong(PyTuple_GET_ITEM(mg, 1)), gw = PyLong_AsLong(PyTuple_GET_ITEM(mg, 2));
    PyObject *gf = PyTuple_GET_ITEM(mg, 3);
    pyth_float8 f = {.enabled = true, .opts = th_float8_options_default()};
    f.opts.input_dtype = (th_dtype)gi;
    f.opts.weight_dtype = (th_dtype)gw;
    f.filter = gf == Py_None ? NULL : Py_NewRef(gf);
    f.param_names = Py_XNewRef(param_names);
    f.only = PySet_New(NULL);
    if (!f.only) rc = -1;
    for (Py_ssize_t k = g; rc == 0 && k < n; k++) {
      PyObject *mk = PyList_GET_ITEM(marks, k);
      if (done[k] || PyLong_AsLong(PyTuple_GET_ITEM(mk, 1)) != gi || PyLong_AsLong(PyTuple_GET_ITEM(mk, 2)) != gw ||
          PyTuple_GET_ITEM(mk, 3) != gf)
        continue;
      done[k] = 1;
      if (PySet_Add(f.only, PyTuple_GET_ITEM(mk, 0)) < 0) rc = -1;
    }
    th_trace *next = NULL;
    if (rc == 0) rc = pyth_float8_apply(&f, cur, &next);
    pyth_float8_clear(&f);
    if (rc == 0) {
      th_trace_free(mine);
      cur = mine = next;
    }
  }
  PyMem_Free(done);
  if (rc < 0) {
    th_trace_free(mine);
    return -1;
  }
  *out = mine;
  return 0;
}

/* _float8_region_begin() -> int: where the region starts in the trace being recorded (its number of
 * top-level bsyms). */
static PyObject *m_float8_region_begin(PyObject *self, PyObject *unused) {
  (void)self, (void)unused;
  if (!pyth_active)
    return PyErr_SetString(PyExc_RuntimeError, "thunder_c: a float8 region needs a trace being recorded"), NULL;
  return PyLong_FromLong(th_trace_num_bsyms(pyth_active->trace));
}

/* _float8_region_end(start, input_dtype, weight_dtype, who): marks the one linear recorded since start
 * (NotImplementedError naming `who` unless there is exactly one eligible linear). */
static PyObject *m_float8_region_end(PyObject *self, PyObject *args) {
  (void)self;
  int start;
  PyObject *idt, *wdt;
  const char *who;
  if (!PyArg_ParseTuple(args, "iOOs:_float8_region_end", &start, &idt, &wdt, &who)) return NULL;
  if (!pyth_active)
    return PyErr_SetString(PyExc_RuntimeError, "thunder_c: a float8 region needs a trace being recorded"), NULL;
  th_dtype in = TH_F8E4M3FN, w = TH_F8E4M3FN;
  if (fp8_dtype_arg(idt, "_float8_region_end", "input_dtype", &in) < 0 ||
      fp8_dtype_arg(wdt, "_float8_region_end", "weight_dtype", &w) < 0)
    return NULL;
  if (pyth_float8_mark_region(pyth_active, start, in, w, NULL, who, true) < 0) return NULL;
  Py_RETURN_NONE;
}

static PyObject *m_float8(PyObject *self, PyObject *args, PyObject *kw) {
  (void)self;
  static char *kwl[] = {"trace", "filter", "input_dtype", "weight_dtype", NULL};
  PyObject *t = NULL, *filter = Py_None, *idt = Py_None, *wdt = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OOO:float8", kwl, &t, &filter, &idt, &wdt)) return NULL;
  const th_trace *tr = pyth_trace_get(t);
  if (!tr)
    return PyErr_Format(PyExc_TypeError, "float8: expected a thunder_c.Trace, got %s", Py_TYPE(t)->tp_name), NULL;
  PyObject *spec = Py_BuildValue("{sOsOsO}", "filter", filter, "input_dtype", idt, "weight_dtype", wdt);
  if (!spec) return NULL;
  pyth_float8 f;
  int rc = pyth_float8_parse(spec, &f, "float8");
  Py_DECREF(spec);
  if (rc < 0) return NULL;
  th_trace *out = NULL;
  rc = pyth_float8_apply(&f, tr, &out);
  pyth_float8_clear(&f);
  if (rc < 0) return NULL;
  return own(TH_OK, out);
}

/* ---- grad ------------------------------------------------------------------------------------------------
 * thunder_c.transforms.grad(trace, requires_grad=None) -> (forward Trace, backward Trace): the core's
 * th_transform_grad. requires_grad: None (every floating input) or one bool per input of the trace. */
static PyObject *m_grad(PyObject *self, PyObject *args, PyObject *kw) {
  (void)self;
  static char *kwl[] = {"trace", "requires_grad", NULL};
  PyObject *t, *rgo = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:grad", kwl, &t, &rgo)) return NULL;
  const th_trace *tr = pyth_trace_get(t);
  if (!tr) return PyErr_Format(PyExc_TypeError, "grad: expected a thunder_c.Trace, got %s", Py_TYPE(t)->tp_name), NULL;
  th_grad_options o = {NULL, 0};
  bool *rg = NULL;
  if (rgo != Py_None) {
    PyObject *seq = PySequence_Fast(rgo, "grad: requires_grad must be None or a sequence of bools (one per input)");
    if (!seq) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    rg = PyMem_Calloc((size_t)(n ? n : 1), sizeof *rg);
    for (Py_ssize_t i = 0; rg && i < n; i++) {
      int b = PyObject_IsTrue(PySequence_Fast_GET_ITEM(seq, i));
      if (b < 0) {
        PyMem_Free(rg);
        Py_DECREF(seq);
        return NULL;
      }
      rg[i] = b;
    }
    Py_DECREF(seq);
    if (!rg) return PyErr_NoMemory();
    o.requires_grad = rg;
    o.ninputs = (int)n;
  }
  th_trace *f = NULL, *b = NULL;
  th_status st = th_transform_grad(tr, rgo != Py_None ? &o : NULL, &f, &b);
  PyMem_Free(rg);
  if (st != TH_OK) return pyth_raise(st);
  PyObject *F = own(TH_OK, f);
  if (!F) {
    th_trace_free(b);
    return NULL;
  }
  PyObject *B = own(TH_OK, b);
  if (!B) {
    Py_DECREF(F);
    return NULL;
  }
  PyObject *r = PyTuple_Pack(2, F, B);
  Py_DECREF(F);
  Py_DECREF(B);
  return r;
}

static PyMethodDef transform_functions[] = {
  {"_float8_region_begin", m_float8_region_begin, METH_NOARGS,
   "internal: start of a float8 region (thunder_c/_torchao.py)."},
  {"_float8_region_end", m_float8_region_end, METH_VARARGS,
   "internal: _float8_region_end(start, input_dtype, weight_dtype, who) marks the region's linear for float8."},
  {"float8", (PyCFunction)(void (*)(void))m_float8, METH_VARARGS | METH_KEYWORDS,
   "float8(trace, filter=None, input_dtype=None, weight_dtype=None) -> Trace: the float8 training transform "
   "(every linear becomes dynamic per-tensor scaled fp8 math with _scaled_mm; see thunder_c.transforms.float8)."},
  {"autocast", (PyCFunction)(void (*)(void))m_autocast, METH_VARARGS | METH_KEYWORDS,
   "autocast(fn_or_trace, dtype): Thunder's autocast transform. dtype is thunder_c.bfloat16 or "
   "thunder_c.float16 (anything else: ValueError). A Trace gives a new Trace (provenance \"Autocast\"); "
   "a function gives a callable whose ops are recorded under autocast when it runs under thunder_c.jit."},
  {"dce", m_dce, METH_O, "dce(trace) -> Trace: Dead Code Elimination."},
  {"cse", m_cse, METH_O,
   "cse(trace) -> Trace: Common Subexpression Elimination (never merges random or in-place ops)."},
  {"del_last_used", m_dlu, METH_O, "del_last_used(trace) -> Trace: a del after each value's last use."},
  {"grad", (PyCFunction)(void (*)(void))m_grad, METH_VARARGS | METH_KEYWORDS,
   "grad(trace, requires_grad=None) -> (forward, backward): reverse-mode autodiff (Thunder's grad transform "
   "and forward/backward split). forward returns ({'output', 'flat_args', 'flat_output'}, (saved tensors, "
   "saved numbers)); backward_fn(saved_for_backward, cotangents) returns one gradient per input (None where "
   "not requested or not reached). requires_grad: one bool per input; None = every floating input."},
  {NULL, NULL, 0, NULL},
};

int pyth_transforms_ready(PyObject *m) {
  if (PyType_Ready(&pyth_autocast_type) < 0) return -1;
  return PyModule_AddFunctions(m, transform_functions);
}
