/* pytrace.c — Trace and BoundSymbol objects: read-only Python views of the core's traces.
 *
 * str(trace) prints it as Thunder prints it, with every level of subsymbols and the provenance line
 * ("# Constructed by Dead Code Elimination (took 0 milliseconds)"); trace.python() prints the top
 * level only. The printing itself is the core's (th_trace_print). A view keeps the object that owns
 * the trace (a cache entry, or a capsule around a parsed trace) alive. */
#include "pyth.h"

typedef struct {
  PyObject_HEAD const th_trace *tr;
  PyObject *owner;
} pyth_trace_obj;

typedef struct {
  PyObject_HEAD const th_bsym *b;
  PyObject *owner;
} pyth_bsym_obj;

static PyTypeObject pyth_bsym_type;

static void owner_destroy(PyObject *cap) { th_trace_free(PyCapsule_GetPointer(cap, "thunder_c.trace")); }

PyObject *pyth_trace_owner_new(th_trace *tr) {
  PyObject *c = PyCapsule_New(tr, "thunder_c.trace", owner_destroy);
  if (!c) th_trace_free(tr);
  return c;
}

PyObject *pyth_trace_wrap(const th_trace *tr, PyObject *owner) {
  if (PyType_Ready(&pyth_bsym_type) < 0) return NULL;
  pyth_trace_obj *t = PyObject_New(pyth_trace_obj, &pyth_trace_type);
  if (!t) return NULL;
  t->tr = tr;
  t->owner = Py_NewRef(owner);
  return (PyObject *)t;
}

const th_trace *pyth_trace_get(PyObject *o) {
  return Py_TYPE(o) == &pyth_trace_type ? ((pyth_trace_obj *)o)->tr : NULL;
}

static void trace_dealloc(PyObject *o) {
  Py_XDECREF(((pyth_trace_obj *)o)->owner);
  PyObject_Free(o);
}

static PyObject *print_trace(const th_trace *tr, int depth) {
  char *s = th_trace_print(tr, depth);
  if (!s) return PyErr_NoMemory();
  PyObject *r = PyUnicode_FromString(s);
  free(s);
  return r;
}

static PyObject *trace_str(PyObject *o) { return print_trace(((pyth_trace_obj *)o)->tr, -1); }

static PyObject *trace_python(PyObject *o, PyObject *args, PyObject *kw) {
  static char *kwl[] = {"print_depth", NULL};
  int depth = 1;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|i:python", kwl, &depth)) return NULL;
  return print_trace(((pyth_trace_obj *)o)->tr, depth);
}

static PyObject *trace_verify(PyObject *o, PyObject *unused) {
  (void)unused;
  th_status st = th_trace_verify(((pyth_trace_obj *)o)->tr);
  if (st != TH_OK) return pyth_raise(st);
  Py_RETURN_NONE;
}

/* The provenance text ("Dead Code Elimination (took 0 milliseconds)"), None if unset. */
static PyObject *trace_provenance(PyObject *o, void *c) {
  (void)c;
  char *s = th_trace_print(((pyth_trace_obj *)o)->tr, 0);
  if (!s) return PyErr_NoMemory();
  const char *tag = "# Constructed by ";
  PyObject *r;
  if (!strncmp(s, tag, strlen(tag))) {
    const char *b = s + strlen(tag), *e = strchr(b, '\n');
    r = PyUnicode_FromStringAndSize(b, e ? e - b : (Py_ssize_t)strlen(b));
  } else {
    r = Py_NewRef(Py_None);
  }
  free(s);
  return r;
}

/* Thunder's trace._provenance: an object whose .pss is the provenance text (a
 * types.SimpleNamespace), None if unset, so code written for Thunder reads it unchanged. */
static PyObject *trace_provenance_obj(PyObject *o, void *c) {
  PyObject *pss = trace_provenance(o, c);
  if (!pss || pss == Py_None) return pss;
  PyObject *types = PyImport_ImportModule("types");
  PyObject *ns = types ? PyObject_GetAttrString(types, "SimpleNamespace") : NULL;
  PyObject *kw = ns ? Py_BuildValue("{sO}", "pss", pss) : NULL, *noargs = kw ? PyTuple_New(0) : NULL;
  PyObject *r = noargs ? PyObject_Call(ns, noargs, kw) : NULL;
  Py_XDECREF(noargs);
  Py_XDECREF(kw);
  Py_XDECREF(ns);
  Py_XDECREF(types);
  Py_DECREF(pss);
  return r;
}

static PyObject *wrap_bsym(const th_bsym *b, PyObject *owner) {
  pyth_bsym_obj *x = PyObject_New(pyth_bsym_obj, &pyth_bsym_type);
  if (!x) return NULL;
  x->b = b;
  x->owner = Py_NewRef(owner);
  return (PyObject *)x;
}

static PyObject *trace_bsyms(PyObject *o, void *c) {
  (void)c;
  pyth_trace_obj *t = (pyth_trace_obj *)o;
  int n = th_trace_num_bsyms(t->tr);
  PyObject *l = PyList_New(n);
  if (!l) return NULL;
  for (int i = 0; i < n; i++) {
    PyObject *b = wrap_bsym(th_trace_bsym(t->tr, i), t->owner);
    if (!b) return Py_DECREF(l), NULL;
    PyList_SET_ITEM(l, i, b);
  }
  return l;
}

static PyObject *trace_inputs(PyObject *o, void *c) {
  (void)c;
  pyth_trace_obj *t = (pyth_trace_obj *)o;
  int n = th_trace_num_inputs(t->tr);
  PyObject *l = PyList_New(n);
  if (!l) return NULL;
  for (int i = 0; i < n; i++) {
    const char *nm = th_value_name(th_trace_input(t->tr, i));
    PyObject *s = PyUnicode_FromString(nm ? nm : "");
    if (!s) return Py_DECREF(l), NULL;
    PyList_SET_ITEM(l, i, s);
  }
  return l;
}

static PyMethodDef trace_methods[] = {
  {"python", (PyCFunction)(void (*)(void))trace_python, METH_VARARGS | METH_KEYWORDS,
   "python(print_depth=1) -> str: the trace as Thunder prints it; print_depth=-1 prints every level "
   "of subsymbols (what str() gives)."},
  {"verify", trace_verify, METH_NOARGS,
   "Re-runs every op's meta and checks shapes, dtypes, devices, SSA and that return is last; raises "
   "RuntimeError naming the value and the op on a mismatch."},
  {NULL, NULL, 0, NULL},
};

static PyGetSetDef trace_getset[] = {
  {"provenance", trace_provenance, NULL, "what made this trace (\"Dead Code Elimination (took 0 milliseconds)\")",
   NULL},
  {"_provenance", trace_provenance_obj, NULL,
   "Thunder's spelling: an object whose .pss is the provenance text, or None", NULL},
  {"bound_symbols", trace_bsyms, NULL, "the top-level bound symbols, in order", NULL},
  {"input_names", trace_inputs, NULL, "the names of the trace's inputs, in order", NULL},
  {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject pyth_trace_type = {
  PyVarObject_HEAD_INIT(NULL, 0).tp_name = "thunder_c.Trace",
  .tp_basicsize = sizeof(pyth_trace_obj),
  .tp_dealloc = trace_dealloc,
  .tp_repr = trace_str,
  .tp_str = trace_str,
  .tp_methods = trace_methods,
  .tp_getset = trace_getset,
  .tp_flags = Py_TPFLAGS_DEFAULT,
  .tp_doc = "A trace: straight-line code of bound symbols, printed as Thunder prints it.",
};

/* ---- BoundSymbol ----------------------------------------------------------------------------------- */

static void bsym_dealloc(PyObject *o) {
  Py_XDECREF(((pyth_bsym_obj *)o)->owner);
  PyObject_Free(o);
}

static PyObject *bsym_qualname(PyObject *o, void *c) {
  (void)c;
  const char *q = th_bsym_qualname(((pyth_bsym_obj *)o)->b);
  return PyUnicode_FromString(q ? q : "");
}

static PyObject *bsym_name(PyObject *o, void *c) {
  (void)c;
  const char *q = th_bsym_qualname(((pyth_bsym_obj *)o)->b);
  const char *dot = q ? strrchr(q, '.') : NULL;
  return PyUnicode_FromString(dot ? dot + 1 : q ? q : "");
}

/* Thunder code reads bsym.sym.name: the symbol's facts live on the bound symbol here. */
static PyObject *bsym_sym(PyObject *o, void *c) {
  (void)c;
  return Py_NewRef(o);
}

static PyObject *bsym_subs(PyObject *o, void *c) {
  (void)c;
  pyth_bsym_obj *x = (pyth_bsym_obj *)o;
  int n = th_bsym_num_subsymbols(x->b);
  PyObject *l = PyList_New(n);
  if (!l) return NULL;
  for (int i = 0; i < n; i++) {
    PyObject *b = wrap_bsym(th_bsym_subsymbol(x->b, i), x->owner);
    if (!b) return Py_DECREF(l), NULL;
    PyList_SET_ITEM(l, i, b);
  }
  return l;
}

static int out_names(const th_arg *a, PyObject *l) {
  if (a->kind == TH_ARG_VALUE) {
    const char *n = th_value_name(a->u.value);
    PyObject *s = PyUnicode_FromString(n ? n : "");
    int r = s ? PyList_Append(l, s) : -1;
    Py_XDECREF(s);
    return r;
  }
  if (a->kind == TH_ARG_TUPLE || a->kind == TH_ARG_LIST || a->kind == TH_ARG_DICT)
    for (int i = 0; i < a->u.seq.n; i++)
      if (out_names(&a->u.seq.items[i], l) < 0) return -1;
  return 0;
}

static PyObject *bsym_outputs(PyObject *o, void *c) {
  (void)c;
  PyObject *l = PyList_New(0);
  th_arg out = th_bsym_output(((pyth_bsym_obj *)o)->b);
  if (l && out_names(&out, l) < 0) Py_CLEAR(l);
  return l;
}

/* Names of the values among the arguments, flattened in order (for `return`: the returned values,
 * then the final versions of the inputs updated in place, which the return carries unprinted). */
static PyObject *bsym_arg_names(PyObject *o, void *c) {
  (void)c;
  const th_bsym *b = ((pyth_bsym_obj *)o)->b;
  PyObject *l = PyList_New(0);
  for (int i = 0; l && i < th_bsym_num_args(b); i++) {
    th_arg a = th_bsym_arg(b, i);
    if (out_names(&a, l) < 0) Py_CLEAR(l);
  }
  return l;
}

/* The executor that claimed the bsym in an execution trace ("eager", "blas", a user executor), or None. */
static PyObject *bsym_executor(PyObject *o, void *c) {
  (void)c;
  const char *e = th_bsym_executor(((pyth_bsym_obj *)o)->b);
  if (!e) Py_RETURN_NONE;
  return PyUnicode_FromString(e);
}

static PyObject *bsym_repr(PyObject *o) {
  PyObject *q = bsym_qualname(o, NULL);
  if (!q) return NULL;
  PyObject *r = PyUnicode_FromFormat("<BoundSymbol %U>", q);
  Py_DECREF(q);
  return r;
}

static PyGetSetDef bsym_getset[] = {
  {"qualname", bsym_qualname, NULL, "the op's qualified name (ltorch.add, prims.linear, fusion0)", NULL},
  {"name", bsym_name, NULL, "the op's name without its module (add)", NULL},
  {"sym", bsym_sym, NULL, "the symbol (here: this object, which carries name and qualname)", NULL},
  {"subsymbols", bsym_subs, NULL, "the decomposition, as bound symbols", NULL},
  {"output_names", bsym_outputs, NULL, "names of the output proxies", NULL},
  {"arg_names", bsym_arg_names, NULL, "names of the values among the arguments, flattened", NULL},
  {"executor", bsym_executor, NULL, "the executor that claimed it (execution traces), else None", NULL},
  {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject pyth_bsym_type = {
  PyVarObject_HEAD_INIT(NULL, 0).tp_name = "thunder_c.BoundSymbol",
  .tp_basicsize = sizeof(pyth_bsym_obj),
  .tp_dealloc = bsym_dealloc,
  .tp_repr = bsym_repr,
  .tp_getset = bsym_getset,
  .tp_flags = Py_TPFLAGS_DEFAULT,
  .tp_doc = "One bound symbol of a trace: an op applied to arguments, with its decomposition.",
};
