/* transforms.c — the transforms from Python: thunder_c.autocast(fn_or_trace, dtype) and
 * thunder_c.transforms.* on Trace objects.
 *
 * autocast(trace, dtype) is the core's function transform (th_transform_autocast). autocast(fn, dtype)
 * wraps a function: when it runs under thunder_c.jit, its ops are recorded inside a cpu and a cuda
 * autocast region of `dtype` (th_trace_autocast_push), which gives the same trace as the function
 * transform and as `torch.autocast` around the call. The other transforms (dce, cse, del_last_used)
 * take a Trace and return a new one. */
#include "pyth.h"

typedef struct {
  PyObject_HEAD
  PyObject *fn;
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
                        th_dtype_name(a->dtype)), NULL;
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
  /* Thunder accepts its own dtypes only (thunder-reference scenario 14) */
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
    return PyErr_Format(PyExc_TypeError, "autocast: expected a function or a Trace, got %s", Py_TYPE(fn)->tp_name), NULL;
  pyth_autocast_fn *a = PyObject_New(pyth_autocast_fn, &pyth_autocast_type);
  if (!a) return NULL;
  a->fn = Py_NewRef(fn);
  a->dtype = dtype;
  return (PyObject *)a;
}

static PyObject *one_trace(PyObject *arg, const char *what, th_status (*f)(const th_trace *, th_trace **)) {
  const th_trace *t = pyth_trace_get(arg);
  if (!t) return PyErr_Format(PyExc_TypeError, "%s: expected a thunder_c.Trace, got %s", what, Py_TYPE(arg)->tp_name), NULL;
  th_trace *out = NULL;
  th_status st = f(t, &out);
  return own(st, out);
}

static PyObject *m_dce(PyObject *self, PyObject *arg) { (void)self; return one_trace(arg, "dce", th_transform_dce); }
static PyObject *m_cse(PyObject *self, PyObject *arg) { (void)self; return one_trace(arg, "cse", th_transform_cse); }
static PyObject *m_dlu(PyObject *self, PyObject *arg) {
  (void)self;
  return one_trace(arg, "del_last_used", th_transform_del_last_used);
}

static PyMethodDef transform_functions[] = {
    {"autocast", (PyCFunction)(void (*)(void))m_autocast, METH_VARARGS | METH_KEYWORDS,
     "autocast(fn_or_trace, dtype): Thunder's autocast transform. dtype is thunder_c.bfloat16 or "
     "thunder_c.float16 (anything else: ValueError). A Trace gives a new Trace (provenance \"Autocast\"); "
     "a function gives a callable whose ops are recorded under autocast when it runs under thunder_c.jit."},
    {"dce", m_dce, METH_O, "dce(trace) -> Trace: Dead Code Elimination."},
    {"cse", m_cse, METH_O, "cse(trace) -> Trace: Common Subexpression Elimination (never merges random or in-place ops)."},
    {"del_last_used", m_dlu, METH_O, "del_last_used(trace) -> Trace: a del after each value's last use."},
    {NULL, NULL, 0, NULL},
};

int pyth_transforms_ready(PyObject *m) {
  if (PyType_Ready(&pyth_autocast_type) < 0) return -1;
  return PyModule_AddFunctions(m, transform_functions);
}
