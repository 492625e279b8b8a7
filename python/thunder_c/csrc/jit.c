/* jit.c — the jitted callable (thunder_c.jit): construction, a call, and introspection.
 *
 * A call builds its cache key (jit_cache.c). A hit runs the entry's program at once (jit_run.c); a miss
 * traces the function with proxies (proxy.c), runs the core's compile pipeline on the trace (verify,
 * DCE, CSE, the execution passes: th_program_compile) and stores the entry (jit_trace.c). When grad is
 * enabled and an input requires grad, the entry holds the grad transform's forward program and its
 * backward (autograd.c), and the outputs come back attached to PyTorch's autograd. */
#include <stdlib.h>
#include <string.h>

#include "jit_internal.h"

jit_strings jit_s;

/* ---- the jitted callable ------------------------------------------------------------------------- */

static void jit_dealloc(PyObject *o) {
  pyth_jit *j = (pyth_jit *)o;
  PyObject_GC_UnTrack(o);
  if (j->weakrefs) PyObject_ClearWeakRefs(o);
  Py_XDECREF(j->fn);
  Py_XDECREF(j->slots);
  Py_XDECREF(j->submodules);
  Py_XDECREF(j->arg_names);
  Py_XDECREF(j->code_fn);
  Py_XDECREF(j->attr_slots);
  Py_XDECREF(j->structure);
  Py_XDECREF(j->cache);
  Py_XDECREF(j->last);
  Py_XDECREF(j->executor_names);
  PyMem_Free(j->executors);
  pyth_float8_clear(&j->float8);
  Py_XDECREF(j->dump_dir);
  Py_XDECREF(j->written);
  Py_XDECREF(j->recorder);
  PyObject_GC_Del(o);
}

static int jit_traverse(PyObject *o, visitproc visit, void *arg) {
  pyth_jit *j = (pyth_jit *)o;
  Py_VISIT(j->fn);
  Py_VISIT(j->slots);
  Py_VISIT(j->submodules);
  Py_VISIT(j->code_fn);
  Py_VISIT(j->attr_slots);
  Py_VISIT(j->structure);
  Py_VISIT(j->cache);
  Py_VISIT(j->last);
  Py_VISIT(j->float8.filter);
  Py_VISIT(j->written);
  Py_VISIT(j->recorder);
  return 0;
}

static int jit_clear(PyObject *o) {
  pyth_jit *j = (pyth_jit *)o;
  Py_CLEAR(j->fn);
  Py_CLEAR(j->slots);
  Py_CLEAR(j->submodules);
  Py_CLEAR(j->code_fn);
  Py_CLEAR(j->attr_slots);
  Py_CLEAR(j->structure);
  Py_CLEAR(j->cache);
  Py_CLEAR(j->last);
  Py_CLEAR(j->written);
  Py_CLEAR(j->recorder);
  return 0;
}

/* The jitted function's miss recorder (thunder_c._compile_stats._Recorder), made on first use. */
static PyObject *recorder(pyth_jit *j) {
  if (j->recorder) return j->recorder;
  if (!jit_recorder_class) return PyErr_SetString(PyExc_RuntimeError, "thunder_c: _compile_stats is not loaded"), NULL;
  PyObject *qn = PyObject_GetAttrString(j->fn, "__qualname__");
  if (!qn) {
    PyErr_Clear();
    qn = PyUnicode_FromString(Py_TYPE(j->fn)->tp_name);
  }
  if (qn) j->recorder = PyObject_CallOneArg(jit_recorder_class, qn);
  Py_XDECREF(qn);
  return j->recorder;
}

/* Records a miss: its reason (why, when only the cache knows it; else the recorder finds what differs
 * from the closest compiled entry) and, past thunder_c.config.recompile_limit, a RecompileWarning. Returns
 * the call's description (for on_entry) or NULL with an exception. */
static PyObject *record_miss(pyth_jit *j, PyObject *args, PyObject *kwargs, const char *why) {
  PyObject *r = recorder(j);
  if (!r) return NULL;
  return PyObject_CallMethod(r, "on_miss", "OOOsO", j->fn, args, kwargs ? kwargs : Py_None, why,
                             j->mode == CACHE_NONE ? Py_False : Py_True); /* no caching: no recompile warning */
}

bool jit_attr_written(const pyth_jit *j, PyObject *md, PyObject *key) {
  if (!j->written || !md) return false;
  PyObject *id = PyLong_FromVoidPtr(md);
  PyObject *names = id ? PyDict_GetItemWithError(j->written, id) : NULL;
  Py_XDECREF(id);
  int in = names ? PySet_Contains(names, key) : 0;
  PyErr_Clear();
  return in == 1;
}

/* Parameter names of a Python function (for naming trace inputs): co_varnames up to the positional
 * and keyword-only count; `skip_self` drops the first (bound methods, Module.forward). */
static PyObject *jit_param_names(PyObject *fn, bool skip_self) {
  PyObject *f = Py_NewRef(fn);
  if (PyMethod_Check(f)) {
    PyObject *g = Py_NewRef(PyMethod_GET_FUNCTION(f));
    Py_DECREF(f);
    f = g;
    skip_self = true;
  }
  PyObject *names = PyList_New(0);
  if (!names) return Py_DECREF(f), NULL;
  if (PyFunction_Check(f)) {
    PyCodeObject *co = (PyCodeObject *)PyFunction_GET_CODE(f);
    PyObject *vn = PyObject_GetAttrString((PyObject *)co, "co_varnames");
    int n = co->co_argcount + co->co_kwonlyargcount;
    for (int i = skip_self ? 1 : 0; vn && i < n && i < PyTuple_GET_SIZE(vn); i++)
      PyList_Append(names, PyTuple_GET_ITEM(vn, i));
    Py_XDECREF(vn);
  }
  PyErr_Clear();
  Py_DECREF(f);
  return names;
}

/* A module's structure as the slots were collected from it: per submodule, its children (identity),
 * the number of its parameters, buffers and hooks. A change (a submodule replaced, a parameter
 * registered, a hook added) makes the jitted module collect its slots again and drop its cache. */
static PyObject *structure_of(pyth_jit *j) {
  PyObject *sig = PyList_New(0);
  static const char *const dicts[] = {"_modules", "_parameters", "_buffers", "_forward_hooks", "_forward_pre_hooks"};
  for (Py_ssize_t s = 0; sig && s < PyList_GET_SIZE(j->submodules); s++) {
    PyObject *mod = PyList_GET_ITEM(j->submodules, s);
    PyObject *md = PyObject_GenericGetDict(mod, NULL);
    for (size_t d = 0; sig && md && d < sizeof dicts / sizeof *dicts; d++) {
      PyObject *x = PyDict_GetItemString(md, dicts[d]);
      PyObject *item = !x || !PyDict_Check(x) ? Py_NewRef(Py_None)
                       : d == 0               ? PyDict_Values(x)
                                              : PyLong_FromSsize_t(PyDict_Size(x));
      if (!item || PyList_Append(sig, item) < 0) Py_CLEAR(sig);
      Py_XDECREF(item);
    }
    /* an attribute added or deleted (other than those forward assigns, which each run sets) */
    Py_ssize_t count = md ? PyDict_Size(md) : 0;
    if (md && j->written) {
      Py_ssize_t pos = 0;
      PyObject *k, *v;
      while (PyDict_Next(md, &pos, &k, &v)) count -= jit_attr_written(j, md, k);
    }
    PyObject *n = md ? PyLong_FromSsize_t(count) : NULL;
    if (!n || PyList_Append(sig, n) < 0) Py_CLEAR(sig);
    Py_XDECREF(n);
    Py_XDECREF(md);
  }
  return sig;
}

static int structure_changed(pyth_jit *j) {
  PyObject *now = structure_of(j);
  if (!now) return -1;
  int same = j->structure ? PyObject_RichCompareBool(now, j->structure, Py_EQ) : 0;
  Py_DECREF(now);
  return same < 0 ? -1 : !same;
}

/* Collects a module's parameter and buffer slots (owner dict, name, qualified name) and submodules. */
static int collect_slots(pyth_jit *j) {
  Py_CLEAR(j->slots);
  Py_CLEAR(j->submodules);
  Py_CLEAR(j->attr_slots);
  Py_CLEAR(j->structure);
  j->slots = PyList_New(0);
  j->submodules = PyList_New(0);
  j->attr_slots = PyList_New(0);
  if (!j->slots || !j->submodules || !j->attr_slots) return -1;
  PyObject *it = PyObject_CallMethod(j->fn, "named_modules", NULL);
  if (!it) return -1;
  PyObject *iter = PyObject_GetIter(it);
  Py_DECREF(it);
  if (!iter) return -1;
  PyObject *pair;
  int rc = 0;
  while (rc == 0 && (pair = PyIter_Next(iter))) {
    PyObject *prefix = PyTuple_GetItem(pair, 0), *mod = PyTuple_GetItem(pair, 1);
    if (!prefix || !mod || PyList_Append(j->submodules, mod) < 0) rc = -1;
    PyObject *dicts[2] = {rc ? NULL : PyObject_GetAttr(mod, jit_s.parameters),
                          rc ? NULL : PyObject_GetAttr(mod, jit_s.buffers)};
    for (int d = 0; d < 2 && rc == 0; d++) {
      if (!dicts[d] || !PyDict_Check(dicts[d])) {
        PyErr_Clear();
        continue;
      }
      Py_ssize_t pos = 0;
      PyObject *k, *v;
      while (PyDict_Next(dicts[d], &pos, &k, &v)) {
        PyObject *q = PyUnicode_GetLength(prefix) ? PyUnicode_FromFormat("%U.%U", prefix, k) : Py_NewRef(k);
        PyObject *slot = q ? PyTuple_Pack(3, dicts[d], k, q) : NULL;
        Py_XDECREF(q);
        if (!slot || PyList_Append(j->slots, slot) < 0) rc = -1;
        Py_XDECREF(slot);
        if (rc) break;
      }
    }
    Py_XDECREF(dicts[0]);
    Py_XDECREF(dicts[1]);
    /* plain attributes a forward may read: tensors (captured) and numbers/strings (baked in) */
    PyObject *md = rc ? NULL : PyObject_GenericGetDict(mod, NULL);
    if (md && PyDict_Check(md)) {
      Py_ssize_t pos = 0;
      PyObject *k, *v;
      while (rc == 0 && PyDict_Next(md, &pos, &k, &v)) {
        const char *ks = PyUnicode_Check(k) ? PyUnicode_AsUTF8(k) : NULL;
        if (!ks || ks[0] == '_' || !strcmp(ks, "training") || jit_attr_written(j, md, k)) continue;
        bool keep = PyObject_TypeCheck(v, (PyTypeObject *)pyth_T.tensor_type) || PyBool_Check(v) ||
                    PyLong_CheckExact(v) || PyFloat_CheckExact(v) || PyUnicode_Check(v);
        if (!keep) continue;
        PyObject *slot = PyTuple_Pack(2, md, k);
        if (!slot || PyList_Append(j->attr_slots, slot) < 0) rc = -1;
        Py_XDECREF(slot);
      }
    }
    Py_XDECREF(md);
    PyErr_Clear();
    Py_DECREF(pair);
  }
  Py_DECREF(iter);
  if (rc || PyErr_Occurred()) return -1;
  j->structure = structure_of(j);
  return j->structure ? 0 : -1;
}

/* Adds the attributes entry e's forward assigns to j->written, and takes the structure afresh so that
 * the first run's assignments do not count as an edit of the module. */
static int note_writes(pyth_jit *j, const pyth_entry *e) {
  if (!j->written && !(j->written = PyDict_New())) return -1;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(e->writes); i++) {
    PyObject *w = PyList_GET_ITEM(e->writes, i);
    PyObject *id = PyLong_FromVoidPtr(PyTuple_GET_ITEM(w, 0));
    PyObject *names = id ? PyDict_GetItemWithError(j->written, id) : NULL;
    if (id && !names && !PyErr_Occurred() && (names = PySet_New(NULL))) {
      if (PyDict_SetItem(j->written, id, names) < 0) Py_CLEAR(names);
      Py_XDECREF(names); /* the dict holds it */
    }
    int rc = names ? PySet_Add(names, PyTuple_GET_ITEM(w, 1)) : -1;
    Py_XDECREF(id);
    if (rc < 0) return -1;
  }
  /* the key no longer guards them either (each run assigns a new tensor) */
  for (Py_ssize_t s = j->attr_slots ? PyList_GET_SIZE(j->attr_slots) - 1 : -1; s >= 0; s--) {
    PyObject *slot = PyList_GET_ITEM(j->attr_slots, s);
    if (jit_attr_written(j, PyTuple_GET_ITEM(slot, 0), PyTuple_GET_ITEM(slot, 1)) &&
        PySequence_DelItem(j->attr_slots, s) < 0)
      return -1;
  }
  PyObject *now = structure_of(j);
  if (!now) return -1;
  Py_XSETREF(j->structure, now);
  return 0;
}

static PyObject *jit_call(PyObject *self, PyObject *args, PyObject *kwargs) {
  pyth_jit *j = (pyth_jit *)self;
  if (kwargs && PyDict_Size(kwargs) == 0) kwargs = NULL;
  /* a jitted function called while another is traced is inlined into that trace (whatever its
   * arguments: a result computed now would be baked into the outer trace as a constant) */
  if (pyth_active && !j->given_trace) {
    /* with float8=..., its linears are marked: the outer jit converts them with these options */
    int start = j->float8.enabled ? th_trace_num_bsyms(pyth_active->trace) : 0;
    PyObject *r = PyObject_Call(j->fn, args, kwargs);
    if (r && j->float8.enabled &&
        pyth_float8_mark_region(pyth_active, start, j->float8.opts.input_dtype, j->float8.opts.weight_dtype,
                                j->float8.filter, "a float8 function", false) < 0)
      Py_CLEAR(r);
    return r;
  }
  if (j->given_trace && kwargs)
    return PyErr_SetString(PyExc_TypeError, "a jitted trace takes its inputs positionally"), NULL;
  tensor_list tl = {.n = 0, .cap = 8};
  tl.t = tl.local;
  PyObject *res = NULL, *ids = NULL, *desc = NULL;
  pyth_entry *e = NULL;
  const char *why = j->mode == CACHE_NONE ? "cache='no caching'" : NULL; /* a miss's reason only the cache knows */
  if (j->is_module) {
    int changed = structure_changed(j);
    if (changed < 0) goto done;
    if (changed) { /* the module was edited since its slots were collected: start over */
      if (collect_slots(j) < 0) goto done;
      PyDict_Clear(j->cache);
      Py_CLEAR(j->last);
      PyObject *r = j->recorder ? PyObject_CallMethod(j->recorder, "on_clear", NULL) : Py_NewRef(Py_None);
      if (!r) goto done;
      Py_DECREF(r);
      why = "the module's parameters, buffers or submodules were replaced, added or removed";
    }
  }
  PyObject *key = jit_cache_key(j, args, kwargs, &tl, &ids);
  if (!key) goto done;
  if (j->mode == CACHE_CONSTANT_VALUES) {
    e = (pyth_entry *)PyDict_GetItemWithError(j->cache, key);
    Py_XINCREF(e);
  } else if (j->mode == CACHE_SAME_INPUT && j->last) {
    e = (pyth_entry *)Py_NewRef(j->last);
  }
  if (!e && PyErr_Occurred()) {
    Py_DECREF(key);
    goto done;
  }
  if (e && !jit_lifted_still_match(e)) { /* a captured tensor changed shape or dtype: trace again */
    if (PyErr_Occurred()) {
      Py_DECREF(key);
      goto done;
    }
    Py_CLEAR(e);
    why = "a tensor the function captured (a closure variable, a global, a module attribute) changed shape or dtype";
  }
  if (e) {
    j->hits++;
  } else {
    j->misses++;
    if (!(desc = record_miss(j, args, kwargs, why)) || pyth_dispatch_init() < 0 ||
        !(e = jit_compile_entry(j, args, kwargs, &tl))) {
      Py_DECREF(key);
      goto done;
    }
    if (e->writes && note_writes(j, e) < 0) {
      Py_DECREF(key);
      goto done;
    }
    /* objects whose identity is in the key stay alive with the entry (so their ids are not reused) */
    if ((ids && PyList_Append(e->pinned, ids) < 0) || pyth_extend_pin(e->prog, e->pinned) < 0 ||
        pyth_extend_pin(pyth_grad_backward_program(e->grad), e->pinned) < 0 ||
        (j->mode == CACHE_CONSTANT_VALUES && PyDict_SetItem(j->cache, key, (PyObject *)e) < 0)) {
      Py_DECREF(key);
      goto done;
    }
    PyObject *r = j->mode == CACHE_NONE ? Py_NewRef(Py_None) : PyObject_CallMethod(j->recorder, "on_entry", "(O)", desc);
    if (!r) {
      Py_DECREF(key);
      goto done;
    }
    Py_DECREF(r);
  }
  Py_DECREF(key);
  Py_XSETREF(j->last, Py_NewRef((PyObject *)e));
  res = jit_run_entry(j, e, &tl);
  if (res && e->writes && jit_apply_writes(e, &res) < 0) Py_CLEAR(res);
  if (res && e->ret_type && jit_rebuild_result(e, &res) < 0) Py_CLEAR(res);
done:
  Py_XDECREF(e);
  Py_XDECREF(ids);
  Py_XDECREF(desc);
  jit_tl_free(&tl);
  return res;
}

/* jit(fn_or_module_or_trace, executors=None, cache="constant values", float8=None, dump_fusions=None) */
static PyObject *jit_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
  static char *kwl[] = {"fn", "executors", "cache", "float8", "dump_fusions", NULL};
  PyObject *fn, *execs = Py_None, *float8 = Py_None, *dump = Py_None;
  const char *cache = "constant values";
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OzOO:jit", kwl, &fn, &execs, &cache, &float8, &dump)) return NULL;
  cache_mode mode;
  if (!cache || !strcmp(cache, "constant values"))
    mode = CACHE_CONSTANT_VALUES;
  else if (!strcmp(cache, "same input"))
    mode = CACHE_SAME_INPUT;
  else if (!strcmp(cache, "no caching"))
    mode = CACHE_NONE;
  else if (!strcmp(cache, "symbolic values"))
    return PyErr_SetString(PyExc_NotImplementedError,
                           "jit: cache='symbolic values' is not supported by thunder_c (each new input shape "
                           "compiles again: thunder_c.compile_stats(jfn) lists the misses); use 'constant values', "
                           "'same input' or 'no caching'"),
           NULL;
  else
    return PyErr_Format(PyExc_ValueError,
                        "jit: unknown cache option '%s' (expected 'constant values', 'same input' or 'no caching')",
                        cache),
           NULL;
  bool is_trace = Py_TYPE(fn) == &pyth_trace_type;
  if (!is_trace && !PyCallable_Check(fn))
    return PyErr_Format(PyExc_TypeError, "jit: expected a function, an nn.Module or a Trace, got %s",
                        Py_TYPE(fn)->tp_name),
           NULL;
  if (dump != Py_None) {
    dump = PyOS_FSPath(dump); /* str or os.PathLike */
    if (!dump || !PyUnicode_Check(dump)) {
      if (!dump) PyErr_Clear();
      Py_XDECREF(dump);
      return PyErr_SetString(PyExc_TypeError, "jit: dump_fusions must be a directory path (str or os.PathLike)"), NULL;
    }
  } else {
    dump = NULL;
  }
  pyth_jit *j = (pyth_jit *)type->tp_alloc(type, 0);
  if (!j) {
    Py_XDECREF(dump);
    return NULL;
  }
  j->dump_dir = dump; /* owned */
  j->fn = Py_NewRef(fn);
  j->mode = mode;
  j->cache = PyDict_New();
  j->given_trace = is_trace ? pyth_trace_get(fn) : NULL;
  if (!j->cache) goto fail;
  if (pyth_float8_parse(float8, &j->float8, "jit") < 0) goto fail;
  if (execs != Py_None) {
    PyObject *l = PyUnicode_Check(execs) ? PyList_New(1) : PySequence_List(execs); /* "blas" = ["blas"] */
    if (l && PyUnicode_Check(execs)) PyList_SET_ITEM(l, 0, Py_NewRef(execs));
    if (!l) goto fail;
    j->executor_names = PyList_New(0);
    Py_ssize_t n = PyList_GET_SIZE(l);
    j->executors = PyMem_Calloc((size_t)(n ? n : 1), sizeof(char *));
    for (Py_ssize_t i = 0; j->executors && j->executor_names && i < n; i++) {
      PyObject *x = PyList_GET_ITEM(l, i);
      PyObject *name = PyUnicode_Check(x) ? Py_NewRef(x) : PyObject_GetAttrString(x, "name");
      if (!name || !PyUnicode_Check(name)) {
        Py_XDECREF(name);
        PyErr_Format(PyExc_TypeError, "jit: executors must be names ('blas', 'eager'), got %s", Py_TYPE(x)->tp_name);
        Py_DECREF(l);
        goto fail;
      }
      PyList_Append(j->executor_names, name);
      j->executors[i] = PyUnicode_AsUTF8(name);
      Py_DECREF(name);
    }
    for (Py_ssize_t i = 0; j->executor_names && i < n; i++)
      if (!PyUnicode_Check(PyList_GET_ITEM(l, i))) PyList_Append(j->executor_names, PyList_GET_ITEM(l, i));
    j->nexecutors = (int)n;
    Py_DECREF(l);
    if (!j->executors || !j->executor_names) goto fail;
  }
  PyObject *module_type = PyObject_GetAttrString(pyth_T.torch, "nn");
  PyObject *mt = module_type ? PyObject_GetAttrString(module_type, "Module") : NULL;
  Py_XDECREF(module_type);
  if (!mt) goto fail;
  j->is_module = !is_trace && PyObject_IsInstance(fn, mt) == 1;
  Py_DECREF(mt);
  if (j->is_module) {
    if (collect_slots(j) < 0) goto fail;
    PyObject *fwd = PyObject_GetAttrString(fn, "forward");
    j->arg_names = fwd ? jit_param_names(fwd, true) : NULL;
    if (fwd && PyMethod_Check(fwd)) j->code_fn = Py_NewRef(PyMethod_GET_FUNCTION(fwd));
    Py_XDECREF(fwd);
  } else {
    PyObject *inner = pyth_autocast_inner(fn); /* jit(autocast(f)): inputs named after f's parameters */
    PyObject *f = inner ? inner : fn;
    j->arg_names = is_trace ? PyList_New(0) : jit_param_names(f, false);
    if (PyMethod_Check(f)) f = PyMethod_GET_FUNCTION(f);
    if (!is_trace && PyFunction_Check(f)) j->code_fn = Py_NewRef(f);
  }
  if (!j->arg_names) goto fail;
  return (PyObject *)j;
fail:
  Py_DECREF(j);
  return NULL;
}

static PyObject *jit_get_fn(PyObject *o, void *c) {
  (void)c;
  return Py_NewRef(((pyth_jit *)o)->fn);
}

static PyGetSetDef jit_getset[] = {
  {"__wrapped__", jit_get_fn, NULL, "the function, module or trace that was jitted", NULL},
  {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject pyth_jit_type = {
  PyVarObject_HEAD_INIT(NULL, 0).tp_name = "thunder_c.JitFunction",
  .tp_basicsize = sizeof(pyth_jit),
  .tp_dealloc = jit_dealloc,
  .tp_call = jit_call,
  .tp_traverse = jit_traverse,
  .tp_clear = jit_clear,
  .tp_new = jit_new,
  .tp_getset = jit_getset,
  .tp_weaklistoffset = offsetof(pyth_jit, weakrefs),
  .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
  .tp_doc =
    "jit(fn, executors=None, cache='constant values', float8=None, dump_fusions=None): a function, nn.Module or Trace compiled by "
    "thunder-c. Calling it traces on a cache miss and runs the compiled program.",
};

/* ---- introspection ---------------------------------------------------------------------------------- */

/* The jitted callable of o (itself, or a ThunderModule's _thunder_jit): a new reference, or NULL with
 * TypeError. */
static pyth_jit *as_jit(PyObject *o) {
  if (PyObject_TypeCheck(o, &pyth_jit_type)) return (pyth_jit *)Py_NewRef(o);
  PyObject *inner = PyObject_GetAttrString(o, "_thunder_jit");
  if (inner && PyObject_TypeCheck(inner, &pyth_jit_type)) return (pyth_jit *)inner;
  Py_XDECREF(inner);
  PyErr_Clear();
  PyErr_Format(PyExc_TypeError, "%R doesn't seem to be a thunder compiled function.", o);
  return NULL;
}

static PyObject *m_last_traces(PyObject *self, PyObject *o) {
  (void)self;
  pyth_jit *j = as_jit(o);
  if (!j) return NULL;
  if (!j->last) {
    Py_DECREF(j);
    return PyErr_Format(PyExc_TypeError, "%R doesn't seem to have been called yet.", o), NULL;
  }
  pyth_entry *e = (pyth_entry *)j->last;
  PyObject *l = PyList_New(0);
  for (int i = 0; l && i < e->ntraces; i++) {
    PyObject *t = pyth_trace_wrap(e->traces[i], (PyObject *)e);
    if (!t || PyList_Append(l, t) < 0) Py_CLEAR(l);
    Py_XDECREF(t);
  }
  if (l && e->grad) { /* under autograd: the grad transform's forward, then the forward program's stages */
    PyObject *t = pyth_trace_wrap(pyth_grad_forward_trace(e->grad), (PyObject *)e);
    if (!t || PyList_Append(l, t) < 0) Py_CLEAR(l);
    Py_XDECREF(t);
  }
  for (int i = 0; l && i < th_program_num_traces(e->prog); i++) { /* the program's stages */
    PyObject *t = pyth_trace_wrap(th_program_stage_trace(e->prog, i, NULL), (PyObject *)e);
    if (!t || PyList_Append(l, t) < 0) Py_CLEAR(l);
    Py_XDECREF(t);
  }
  Py_DECREF(j);
  return l;
}

static PyObject *m_last_backward_traces(PyObject *self, PyObject *o) {
  (void)self;
  pyth_jit *j = as_jit(o);
  if (!j) return NULL;
  if (!j->last) {
    Py_DECREF(j);
    return PyErr_Format(PyExc_TypeError, "%R doesn't seem to have been called yet.", o), NULL;
  }
  pyth_entry *e = (pyth_entry *)j->last;
  PyObject *l = e->grad ? pyth_grad_backward_traces(e->grad, (PyObject *)e) : PyList_New(0);
  Py_DECREF(j);
  return l;
}

static PyObject *m_cache_hits(PyObject *self, PyObject *o) {
  (void)self;
  pyth_jit *j = as_jit(o);
  PyObject *r = j ? PyLong_FromLongLong(j->hits) : NULL;
  Py_XDECREF(j);
  return r;
}

static PyObject *m_cache_misses(PyObject *self, PyObject *o) {
  (void)self;
  pyth_jit *j = as_jit(o);
  PyObject *r = j ? PyLong_FromLongLong(j->misses) : NULL;
  Py_XDECREF(j);
  return r;
}

static PyObject *m_stats_recorder(PyObject *self, PyObject *o) {
  (void)self;
  pyth_jit *j = as_jit(o);
  PyObject *r = j ? recorder(j) : NULL;
  Py_XINCREF(r);
  Py_XDECREF(j);
  return r;
}

static PyObject *m_cache_entries(PyObject *self, PyObject *o) {
  (void)self;
  pyth_jit *j = as_jit(o);
  if (!j) return NULL;
  Py_ssize_t n = j->mode == CACHE_CONSTANT_VALUES ? PyDict_Size(j->cache) : j->mode == CACHE_SAME_INPUT && j->last;
  Py_DECREF(j);
  return PyLong_FromSsize_t(n);
}

static PyObject *m_set_recorder_class(PyObject *self, PyObject *cls) {
  (void)self;
  Py_XSETREF(jit_recorder_class, Py_NewRef(cls));
  Py_RETURN_NONE;
}

static PyObject *m_set_mode_class(PyObject *self, PyObject *cls) {
  (void)self;
  Py_XSETREF(jit_mode_class, Py_NewRef(cls));
  Py_RETURN_NONE;
}

static PyObject *m_set_module_hook(PyObject *self, PyObject *fn) {
  (void)self;
  Py_XSETREF(jit_module_hook, Py_NewRef(fn));
  Py_RETURN_NONE;
}

static PyMethodDef jit_functions[] = {
  {"last_traces", m_last_traces, METH_O,
   "last_traces(jfn) -> list of Trace: the traces of the last call's compilation, in pipeline order "
   "(initial, [float8,] Dead Code Elimination, Common Subexpression Elimination, [Fuse Attention: after it, or "
   "under autograd in its place,] [under autograd: the grad transform's forward,] Transform for execution, [fusion,] Delete Last Used)."},
  {"last_backward_traces", m_last_backward_traces, METH_O,
   "last_backward_traces(jfn) -> list of Trace: the backward of the last call's compilation under autograd "
   "(Grad transform pass, Transform for execution, [fusion,] Delete Last Used); [] when it ran forward only."},
  {"cache_hits", m_cache_hits, METH_O, "cache_hits(jfn) -> int: calls that reused a compiled program."},
  {"cache_misses", m_cache_misses, METH_O, "cache_misses(jfn) -> int: calls that traced and compiled."},
  {"_stats_recorder", m_stats_recorder, METH_O, "internal: the jitted function's miss recorder (thunder_c.compile_stats)."},
  {"_cache_entries", m_cache_entries, METH_O, "internal: the compiled entries the jitted function's cache holds."},
  {"_set_recorder_class", m_set_recorder_class, METH_O, "internal: thunder_c._compile_stats._Recorder."},
  {"_set_mode_class", m_set_mode_class, METH_O, "internal: the TorchFunctionMode subclass to enter while tracing."},
  {"_set_module_hook", m_set_module_hook, METH_O,
   "internal: hook(submodules) -> undo callable or None, called before a module is traced (thunder_c._torchao)."},
  {NULL, NULL, 0, NULL},
};

int pyth_jit_ready(PyObject *m) {
  if (PyType_Ready(&pyth_jit_type) < 0 || PyType_Ready(&jit_entry_type) < 0) return -1;
  if (!(jit_s.dtype = PyUnicode_InternFromString("dtype")) || !(jit_s.is_neg = PyUnicode_InternFromString("is_neg")) ||
      !(jit_s.requires_grad = PyUnicode_InternFromString("requires_grad")) ||
      !(jit_s.detach = PyUnicode_InternFromString("detach")) ||
      !(jit_s.training = PyUnicode_InternFromString("training")) ||
      !(jit_s.parameters = PyUnicode_InternFromString("_parameters")) ||
      !(jit_s.buffers = PyUnicode_InternFromString("_buffers")) ||
      !(jit_s.enter = PyUnicode_InternFromString("__enter__")) ||
      !(jit_s.exit = PyUnicode_InternFromString("__exit__")))
    return -1;
  if (PyModule_AddObjectRef(m, "jit", (PyObject *)&pyth_jit_type) < 0) return -1;
  return PyModule_AddFunctions(m, jit_functions);
}
