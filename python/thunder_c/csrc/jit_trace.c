/* jit_trace.c — a cache miss (jit_internal.h): tracing the jitted function on proxies and compiling its
 * trace into a cache entry.
 *
 * jit_compile_entry runs the steps below in order: arguments become proxies named after the function's
 * parameters, a module's parameters and buffers are swapped for proxies while it is traced, inputs that
 * share memory start in one alias group, the function runs under thunder_c's torch-function mode (its
 * torch calls are recorded, proxy.c), the return value (with the final versions of inputs updated in
 * place) ends the initial trace, and the module is put back as it was. Then the trace is compiled:
 * [float8,] then the core's pipeline (th_program_compile: verify, DCE, CSE, the execution passes), or
 * under autograd th_compile_prepare (verify, DCE, CSE), the grad transform and each half from the
 * execution pass on (autograd.c). The entry keeps the initial [, float8] [, DCE and CSE] traces; the
 * rest are its programs' stage traces (thunder_c.last_traces). */
#include <stdlib.h>
#include <string.h>

#include "jit_internal.h"

PyObject *jit_mode_class, *jit_module_hook, *jit_recorder_class;
static unsigned long epoch_counter;

/* ---- cache entries ------------------------------------------------------------------------------- */

static void entry_dealloc(PyObject *o) {
  pyth_entry *e = (pyth_entry *)o;
  PyObject_GC_UnTrack(o);
  th_program_free(e->prog);
  pyth_grad_free(e->grad);
  for (int i = 0; i < e->ntraces; i++) th_trace_free(e->traces[i]);
  Py_XDECREF(e->lifted);
  Py_XDECREF(e->pinned);
  Py_XDECREF(e->writes);
  Py_XDECREF(e->ret_type);
  PyMem_Free(e->param_input);
  PyObject_GC_Del(o);
}

/* Entries hold Python objects (captured tensors, identity-keyed arguments) that may refer back to
 * the jitted function (a module whose forward calls it): the cycle collector must see them. */
static int entry_traverse(PyObject *o, visitproc visit, void *arg) {
  pyth_entry *e = (pyth_entry *)o;
  Py_VISIT(e->lifted);
  Py_VISIT(e->pinned);
  Py_VISIT(e->writes);
  Py_VISIT(e->ret_type);
  return 0;
}

static int entry_clear(PyObject *o) {
  pyth_entry *e = (pyth_entry *)o;
  Py_CLEAR(e->pinned);
  return 0;
}

PyTypeObject jit_entry_type = {
  PyVarObject_HEAD_INIT(NULL, 0).tp_name = "thunder_c._CacheEntry",
  .tp_basicsize = sizeof(pyth_entry),
  .tp_dealloc = entry_dealloc,
  .tp_traverse = entry_traverse,
  .tp_clear = entry_clear,
  .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
};

/* ---- tracing helpers ------------------------------------------------------------------------------ */

typedef struct {
  pyth_tracer tr;
  int next_input;
  PyObject *inputs; /* list: the proxy of each trace input, in order */
} trace_ctx;

/* Rebuilds argument `o` with proxies in place of tensors, adding one trace input per tensor in the
 * order walk() met them. `name` is the input name for a tensor here (NULL: a fresh t<N>). */
static PyObject *proxify(trace_ctx *c, PyObject *o, const char *name, int depth) {
  if (PyObject_TypeCheck(o, (PyTypeObject *)pyth_T.tensor_type)) {
    PyObject *dt = PyObject_GetAttrString(o, "dtype"), *shape = PyObject_GetAttrString(o, "shape");
    PyObject *dev = PyObject_GetAttrString(o, "device");
    PyObject *r = NULL;
    th_dtype dtype;
    th_device device;
    int64_t sh[TH_MAX_DIMS];
    Py_ssize_t nd = shape ? PyTuple_Size(shape) : -1;
    if (!dt || !dev || nd < 0) goto done;
    if (!pyth_dtype_from(dt, &dtype)) {
      PyErr_Format(PyExc_NotImplementedError, "thunder_c: input %s has dtype %R, which thunder_c does not support",
                   name ? name : "", dt);
      goto done;
    }
    if (!pyth_device_from(dev, &device)) {
      PyErr_Format(PyExc_NotImplementedError, "thunder_c: input %s is on device %R, which thunder_c does not support",
                   name ? name : "", dev);
      goto done;
    }
    if (nd > TH_MAX_DIMS) {
      PyErr_Format(PyExc_NotImplementedError, "thunder_c: input %s has rank %zd; thunder_c supports rank <= %d",
                   name ? name : "", nd, TH_MAX_DIMS);
      goto done;
    }
    for (Py_ssize_t i = 0; i < nd; i++) sh[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i));
    if (PyErr_Occurred()) goto done;
    /* named after the parameter when that name is a free Python identifier, else t<N> */
    th_value *v = name ? th_trace_add_tensor_input(c->tr.trace, name, dtype, device, (int)nd, sh) : NULL;
    if (!v) v = th_trace_add_tensor_input(c->tr.trace, NULL, dtype, device, (int)nd, sh);
    if (!v) {
      pyth_raise(th_last_status());
      goto done;
    }
    c->next_input++;
    r = pyth_proxy_new(&c->tr, v);
    if (r && PyList_Append(c->inputs, r) < 0) Py_CLEAR(r);
    PyObject *rg = r ? PyObject_GetAttr(o, jit_s.requires_grad) : NULL;
    if (r && (!rg || (rg == Py_True && PySet_Add(c->tr.grad_leaves, r) < 0))) Py_CLEAR(r);
    Py_XDECREF(rg);
  done:
    Py_XDECREF(dt);
    Py_XDECREF(shape);
    Py_XDECREF(dev);
    return r;
  }
  if (depth > 64) return PyErr_SetString(PyExc_RecursionError, "thunder_c: arguments nested too deeply"), NULL;
  if (PyTuple_Check(o) || PyList_Check(o)) {
    Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
    PyObject *r = PyList_New(n);
    if (!r) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
      char sub[128];
      if (name) snprintf(sub, sizeof sub, "%s_%zd", name, i);
      PyObject *x = proxify(c, PySequence_Fast_GET_ITEM(o, i), name ? sub : NULL, depth + 1);
      if (!x) return Py_DECREF(r), NULL;
      PyList_SET_ITEM(r, i, x);
    }
    if (PyList_Check(o)) return r;
    PyObject *t = PyList_AsTuple(r);
    Py_DECREF(r);
    if (t && !PyTuple_CheckExact(o)) { /* namedtuples and torch.Size keep their type */
      PyObject *nt = PyObject_CallObject((PyObject *)Py_TYPE(o), t);
      if (!nt) {
        PyErr_Clear();
        nt = PyObject_Call((PyObject *)Py_TYPE(o), t, NULL);
      }
      if (!nt) {
        PyErr_Clear();
        nt = PyObject_CallOneArg((PyObject *)Py_TYPE(o), t);
      }
      Py_DECREF(t);
      return nt;
    }
    return t;
  }
  if (PyDict_Check(o)) {
    PyObject *r = PyDict_New();
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (r && PyDict_Next(o, &pos, &k, &v)) {
      char sub[128];
      const char *ks = PyUnicode_Check(k) ? PyUnicode_AsUTF8(k) : NULL;
      if (name && ks) snprintf(sub, sizeof sub, "%s_%s", name, ks);
      PyObject *x = proxify(c, v, name && ks ? sub : NULL, depth + 1);
      if (!x || PyDict_SetItem(r, k, x) < 0) Py_CLEAR(r);
      Py_XDECREF(x);
    }
    return r;
  }
  return Py_NewRef(o);
}

int jit_tensor_input_index(const pyth_jit *j, const pyth_entry *e, int i) {
  if (i < e->nargs_tensors) return i;
  int s = i - e->nargs_tensors;
  if (!j->is_module || s >= PyList_GET_SIZE(j->slots)) return -1;
  return e->param_input[s];
}

/* Puts back the submodule attributes of `snapshots` (list of (__dict__, copy)) that tracing rebound. With
 * `writes` (a list), each assignment forward made is recorded there first, to be replayed after every
 * run (jit_apply_writes): a computed tensor (a proxy) as (__dict__, name) — its value becomes an extra
 * output of the program, in this order, appended to *proxies — and None, a bool, int, float or str as
 * (__dict__, name, value). Other assignments are undone without a replay (the snapshot wins). */
static int restore_module_attributes(PyObject *snapshots, PyObject *writes, PyObject *proxies) {
  int rc = 0;
  PyObject *consts = writes ? PyList_New(0) : NULL;
  if (writes && !consts) return -1;
  for (Py_ssize_t s = 0; s < PyList_GET_SIZE(snapshots); s++) {
    PyObject *md = PyTuple_GET_ITEM(PyList_GET_ITEM(snapshots, s), 0);
    PyObject *old = PyTuple_GET_ITEM(PyList_GET_ITEM(snapshots, s), 1);
    PyObject *keys = PyDict_Keys(md);
    for (Py_ssize_t i = 0; keys && i < PyList_GET_SIZE(keys); i++) {
      PyObject *k = PyList_GET_ITEM(keys, i);
      PyObject *now = PyDict_GetItem(md, k), *was = PyDict_GetItem(old, k);
      if (now == was) continue;
      if (writes && rc == 0 && now) {
        PyObject *w = NULL;
        if (Py_TYPE(now) == &pyth_proxy_type) {
          w = PyTuple_Pack(2, md, k);
          if (!w || PyList_Append(proxies, now) < 0) rc = -1;
        } else if (now == Py_None || PyBool_Check(now) || PyLong_CheckExact(now) || PyFloat_CheckExact(now) ||
                   PyUnicode_Check(now)) {
          w = PyTuple_Pack(3, md, k, now);
        }
        if (w && PyList_Append(Py_TYPE(now) == &pyth_proxy_type ? writes : consts, w) < 0) rc = -1;
        Py_XDECREF(w);
      }
      /* undo: the module's state is the caller's, and the runs replay the writes */
      if (was)
        PyDict_SetItem(md, k, was);
      else
        PyDict_DelItem(md, k);
    }
    if (!keys) rc = -1;
    Py_XDECREF(keys);
  }
  if (writes && rc == 0 && PyList_SetSlice(writes, PyList_GET_SIZE(writes), PyList_GET_SIZE(writes), consts) < 0)
    rc = -1;
  Py_XDECREF(consts);
  if (rc == 0 && PyErr_Occurred()) PyErr_Clear();
  return rc;
}

int jit_rebuild_result(pyth_entry *e, PyObject **res) {
  if (!PyDict_Check(*res)) return 0;
  /* a dataclass-like ModelOutput takes its fields by keyword; an OrderedDict subclass the dict */
  PyObject *empty = PyTuple_New(0);
  PyObject *r = empty ? PyObject_Call(e->ret_type, empty, *res) : NULL;
  if (!r) {
    PyErr_Clear();
    r = PyObject_CallOneArg(e->ret_type, *res);
  }
  Py_XDECREF(empty);
  if (!r) return -1;
  Py_SETREF(*res, r);
  return 0;
}

int jit_apply_writes(pyth_entry *e, PyObject **res) {
  Py_ssize_t nw = PyList_GET_SIZE(e->writes), nt = 0;
  while (nt < nw && PyTuple_GET_SIZE(PyList_GET_ITEM(e->writes, nt)) == 2) nt++;
  PyObject *r = *res;
  if (!PyTuple_Check(r) || PyTuple_GET_SIZE(r) != 2 || !PyTuple_Check(PyTuple_GET_ITEM(r, 1)) ||
      PyTuple_GET_SIZE(PyTuple_GET_ITEM(r, 1)) != nt) {
    PyErr_SetString(PyExc_RuntimeError, "thunder_c: internal error: the program's attribute outputs are missing");
    return -1;
  }
  for (Py_ssize_t i = 0; i < nw; i++) {
    PyObject *w = PyList_GET_ITEM(e->writes, i);
    PyObject *v = i < nt ? PyTuple_GET_ITEM(PyTuple_GET_ITEM(r, 1), i) : PyTuple_GET_ITEM(w, 2);
    if (PyDict_SetItem(PyTuple_GET_ITEM(w, 0), PyTuple_GET_ITEM(w, 1), v) < 0) return -1;
  }
  *res = Py_NewRef(PyTuple_GET_ITEM(r, 0));
  Py_DECREF(r);
  return 0;
}

/* The module attributes forward assigned (e->writes, when there are any; the module is put back): the
 * computed tensors among them travel as extra outputs, *result becoming (result, (tensors...)). */
static int record_writes(pyth_entry *e, PyObject *snapshots, PyObject **result) {
  PyObject *writes = PyList_New(0), *proxies = PyList_New(0);
  int rc = writes && proxies ? restore_module_attributes(snapshots, writes, proxies) : -1;
  if (rc == 0 && PyList_GET_SIZE(writes) > 0) {
    PyObject *extra = PyList_AsTuple(proxies);
    PyObject *wrapped = extra ? PyTuple_Pack(2, *result, extra) : NULL;
    Py_XDECREF(extra);
    if (wrapped) {
      Py_SETREF(*result, wrapped);
      e->writes = Py_NewRef(writes);
    } else {
      rc = -1;
    }
  }
  Py_XDECREF(writes);
  Py_XDECREF(proxies);
  return rc;
}

/* Which trace inputs require grad (rg, nin entries): arguments and module parameters by the call's
 * requires_grad (part of the key), captured tensors by theirs now. 1 when grad is enabled and one
 * does, 0 when the call runs forward only, -1 with an exception. */
static int grad_inputs(const pyth_jit *j, const pyth_entry *e, const tensor_list *tl, int nin, bool *rg) {
  PyObject *ge = PyObject_CallNoArgs(pyth_T.is_grad_enabled);
  if (!ge) return -1;
  bool enabled = ge == Py_True;
  Py_DECREF(ge);
  if (!enabled) return 0;
  int any = 0;
  for (int i = 0; i < tl->n; i++) {
    int ix = jit_tensor_input_index(j, e, i);
    if (ix >= 0 && ix < nin && tl->t[i].requires_grad) any = rg[ix] = true;
  }
  Py_ssize_t nl = PyList_GET_SIZE(e->lifted);
  for (Py_ssize_t i = 0; i < nl; i++) {
    int ix = nin - (int)nl + (int)i;
    PyObject *r = PyObject_GetAttr(PyList_GET_ITEM(e->lifted, i), jit_s.requires_grad);
    if (!r) return -1;
    if (r == Py_True && ix >= 0) any = rg[ix] = true;
    Py_DECREF(r);
  }
  return any;
}

/* ---- a cache miss, step by step ----------------------------------------------------------------------- */

static pyth_entry *entry_new(void) {
  pyth_entry *e = PyObject_GC_New(pyth_entry, &jit_entry_type);
  if (!e) return NULL;
  e->ntraces = 0;
  e->prog = NULL;
  e->grad = NULL;
  e->rng_draws = 0;
  e->lifted = PyList_New(0);
  e->pinned = PyList_New(0);
  e->param_input = NULL;
  e->nparams_in = 0;
  e->nargs_tensors = 0;
  e->writes = NULL;
  e->ret_type = NULL;
  PyObject_GC_Track((PyObject *)e);
  if (!e->lifted || !e->pinned) Py_CLEAR(e);
  return e;
}

static th_compile_options compile_options(const pyth_jit *j) {
  th_compile_options o = {0};
  o.executors = j->executors;
  o.nexecutors = j->nexecutors;
  o.dump_dir = j->dump_dir ? PyUnicode_AsUTF8(j->dump_dir) : NULL;
  return o;
}

/* jit(trace): the given trace is the program; its owner outlives the entry through j->fn. */
static int compile_given(pyth_jit *j, pyth_entry *e, const tensor_list *tl) {
  th_compile_options o = compile_options(j);
  const th_trace *given = j->given_trace;
  if (j->float8.enabled) { /* jit(trace, float8=...): the transform's trace is the program */
    th_trace *f8 = NULL;
    if (pyth_float8_apply(&j->float8, given, &f8) < 0) return -1;
    e->traces[e->ntraces++] = f8;
    given = f8;
  }
  th_status st = th_program_compile(given, &o, &e->prog);
  if (st != TH_OK) return pyth_raise(st), -1;
  e->rng_draws = th_program_num_random_ops(e->prog) > 0 ? pyth_rng_eager_draws(given) : 0;
  e->nargs_tensors = tl->n;
  return 0;
}

/* factory functions (torch.ones(3)) take torch's default dtype, which the core's ops do not read */
static int check_default_dtype(void) {
  PyObject *dd = PyObject_CallNoArgs(pyth_T.get_default_dtype);
  if (!dd) return -1;
  bool f32 = dd == pyth_T.dtypes[TH_F32];
  if (!f32)
    PyErr_Format(PyExc_NotImplementedError,
                 "thunder_c: torch.set_default_dtype(%R) is not supported (thunder-c's factory functions "
                 "default to float32); pass dtype= explicitly and restore the default",
                 dd);
  Py_DECREF(dd);
  return f32 ? 0 : -1;
}

/* The directory of a module's __file__: everything up to its last '/' (NULL when there is none). */
static PyObject *file_dir(PyObject *file) {
  if (!file || !PyUnicode_Check(file)) return NULL;
  Py_ssize_t n = PyUnicode_GetLength(file);
  Py_ssize_t slash = PyUnicode_FindChar(file, '/', 0, n, -1);
  return slash > 0 ? PyUnicode_Substring(file, 0, slash + 1) : NULL;
}

/* A new tracer with an empty initial trace "computation" (c->tr.trace, owned by c until the entry takes
 * it), for entry e (captured tensors go to e->lifted). tracer_close releases what it holds. */
static int tracer_open(trace_ctx *c, pyth_entry *e) {
  memset(c, 0, sizeof *c);
  c->tr.trace = th_trace_new("computation");
  c->tr.epoch = ++epoch_counter;
  c->tr.lifted = e->lifted;
  c->tr.lifted_ids = PyDict_New();
  c->tr.groups = PyDict_New();
  c->inputs = PyList_New(0);
  c->tr.grad_leaves = PySet_New(NULL);
  PyObject *pkg = PyImport_ImportModule("thunder_c");
  PyObject *pkg_file = pkg ? PyObject_GetAttrString(pkg, "__file__") : NULL;
  Py_XDECREF(pkg);
  PyObject *torch_file = PyObject_GetAttrString(pyth_T.torch, "__file__");
  PyErr_Clear();
  c->tr.pkg_dir = file_dir(pkg_file);
  c->tr.torch_dir = file_dir(torch_file);
  Py_XDECREF(pkg_file);
  Py_XDECREF(torch_file);
  PyErr_Clear();
  if (!c->tr.trace) return pyth_raise(th_last_status()), -1;
  if (!c->tr.lifted_ids || !c->tr.groups || !c->inputs || !c->tr.grad_leaves) return -1;
  return 0;
}

static void tracer_close(trace_ctx *c) {
  th_trace_free(c->tr.trace);
  c->tr.trace = NULL;
  Py_CLEAR(c->tr.lifted_ids);
  Py_CLEAR(c->tr.groups);
  Py_CLEAR(c->inputs);
  Py_CLEAR(c->tr.grad_leaves);
  Py_CLEAR(c->tr.pkg_dir);
  Py_CLEAR(c->tr.torch_dir);
  Py_CLEAR(c->tr.float8_marks);
}

/* arguments -> proxies (*pargs, *pkwargs), named after the function's parameters */
static int proxify_arguments(pyth_jit *j, pyth_entry *e, trace_ctx *c, PyObject *args, PyObject *kwargs,
                             PyObject **pargs, PyObject **pkwargs) {
  Py_ssize_t na = PyTuple_GET_SIZE(args), nnames = PyList_GET_SIZE(j->arg_names);
  if (!(*pargs = PyTuple_New(na))) return -1;
  for (Py_ssize_t i = 0; i < na; i++) {
    char nm[128];
    const char *pn = i < nnames ? PyUnicode_AsUTF8(PyList_GET_ITEM(j->arg_names, i)) : NULL;
    if (pn)
      snprintf(nm, sizeof nm, "%s", pn);
    else
      snprintf(nm, sizeof nm, "args_%zd", i);
    PyObject *x = proxify(c, PyTuple_GET_ITEM(args, i), nm, 0);
    if (!x) return -1;
    PyTuple_SET_ITEM(*pargs, i, x);
  }
  if (kwargs) {
    if (!(*pkwargs = PyDict_New())) return -1;
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(kwargs, &pos, &k, &v)) {
      PyObject *x = proxify(c, v, PyUnicode_AsUTF8(k), 0);
      if (!x || PyDict_SetItem(*pkwargs, k, x) < 0) {
        Py_XDECREF(x);
        return -1;
      }
      Py_DECREF(x);
    }
  }
  e->nargs_tensors = c->next_input;
  return 0;
}

/* module parameters and buffers -> proxies, swapped into the module while it is traced (*saved: the
 * tensors they replace, put back by restore_module) */
static int proxify_module_state(pyth_jit *j, pyth_entry *e, trace_ctx *c, PyObject **saved) {
  Py_ssize_t ns = PyList_GET_SIZE(j->slots);
  e->param_input = PyMem_Calloc((size_t)(ns ? ns : 1), sizeof(int));
  *saved = PyList_New(ns);
  if (!e->param_input || !*saved) return -1;
  for (Py_ssize_t s = 0; s < ns; s++) {
    PyObject *slot = PyList_GET_ITEM(j->slots, s);
    PyObject *d = PyTuple_GET_ITEM(slot, 0), *k = PyTuple_GET_ITEM(slot, 1), *q = PyTuple_GET_ITEM(slot, 2);
    PyObject *t = PyDict_GetItemWithError(d, k);
    if (!t) {
      if (!PyErr_Occurred()) PyErr_Format(PyExc_RuntimeError, "thunder_c: the module's parameter %U disappeared", q);
      return -1;
    }
    PyList_SET_ITEM(*saved, s, Py_NewRef(t));
    /* a parameter shared by two submodules is one input */
    int same = -1;
    for (Py_ssize_t r = 0; r < s && same < 0; r++)
      if (PyList_GET_ITEM(*saved, r) == t) same = (int)r;
    PyObject *px;
    if (same >= 0) {
      e->param_input[s] = e->param_input[same];
      PyObject *sd = PyTuple_GET_ITEM(PyList_GET_ITEM(j->slots, same), 0);
      px = Py_XNewRef(PyDict_GetItem(sd, PyTuple_GET_ITEM(PyList_GET_ITEM(j->slots, same), 1)));
    } else if (t == Py_None) {
      e->param_input[s] = -1;
      px = Py_NewRef(Py_None);
    } else {
      char nm[160];
      const char *qs = PyUnicode_AsUTF8(q);
      snprintf(nm, sizeof nm, "t_%s", qs ? qs : "param");
      for (char *p = nm; *p; p++)
        if (*p == '.') *p = '_';
      e->param_input[s] = c->next_input;
      px = proxify(c, t, nm, 0);
      e->nparams_in++;
    }
    if (!px || PyDict_SetItem(d, k, px) < 0) {
      Py_XDECREF(px);
      return -1;
    }
    Py_DECREF(px);
  }
  return 0;
}

/* inputs whose memory overlaps (f(a, a), a parameter shared as a view) start in one alias group */
static int join_input_aliases(const pyth_jit *j, const pyth_entry *e, trace_ctx *c, const tensor_list *tl) {
  int32_t *first = PyMem_Malloc(sizeof *first * (size_t)(tl->n ? tl->n : 1));
  int rc = first ? jit_alias_roots(tl, first) : (PyErr_NoMemory(), -1);
  for (int i = 0; rc == 0 && i < tl->n; i++) {
    if (first[i] == i) continue;
    int ii = jit_tensor_input_index(j, e, i), kk = jit_tensor_input_index(j, e, first[i]);
    if (ii < 0 || kk < 0 || ii == kk || ii >= PyList_GET_SIZE(c->inputs) || kk >= PyList_GET_SIZE(c->inputs)) continue;
    rc = pyth_alias_join(&c->tr, PyList_GET_ITEM(c->inputs, ii), PyList_GET_ITEM(c->inputs, kk));
  }
  PyMem_Free(first);
  return rc;
}

/* module state: a snapshot of every submodule's attributes, to undo assignments made while tracing
 * (a list of (__dict__, copy); NULL with an exception) */
static PyObject *snapshot_module(const pyth_jit *j) {
  PyObject *snapshots = PyList_New(0);
  for (Py_ssize_t s = 0; snapshots && s < PyList_GET_SIZE(j->submodules); s++) {
    PyObject *md = PyObject_GenericGetDict(PyList_GET_ITEM(j->submodules, s), NULL);
    PyObject *copy = md ? PyDict_Copy(md) : NULL;
    PyObject *pair = copy ? PyTuple_Pack(2, md, copy) : NULL;
    if (!pair || PyList_Append(snapshots, pair) < 0) Py_CLEAR(snapshots);
    Py_XDECREF(md);
    Py_XDECREF(copy);
    Py_XDECREF(pair);
  }
  return snapshots;
}

/* Calls `mode`'s __exit__ keeping the pending exception, if any; without one, a failing __exit__
 * clears *result. */
static void exit_mode(PyObject *mode, PyObject **result) {
  PyObject *et, *ev, *tb;
  PyErr_Fetch(&et, &ev, &tb);
  PyObject *r = PyObject_CallMethod(mode, "__exit__", "OOO", Py_None, Py_None, Py_None);
  Py_XDECREF(r);
  if (et)
    PyErr_Restore(et, ev, tb);
  else if (!r && result)
    Py_CLEAR(*result);
}

/* Runs the function on the proxies under the mode that routes torch calls to the tracer (pyth_active
 * must be c's); torch's default generator must come out as it went in (rng.c). The result, or NULL. */
static PyObject *call_traced(pyth_jit *j, PyObject *pargs, PyObject *pkwargs) {
  PyObject *mode = NULL, *result = NULL;
  if (jit_mode_class) {
    mode = PyObject_CallNoArgs(jit_mode_class);
    PyObject *r = mode ? PyObject_CallMethodNoArgs(mode, jit_s.enter) : NULL;
    if (!r) {
      Py_XDECREF(mode);
      return NULL;
    }
    Py_DECREF(r);
  }
  PyObject *rng_before = pyth_rng_snapshot();
  { /* trace-time stand-ins for submodules thunder_c records itself (torchao's Float8Linear) */
    const bool hooked = j->is_module && jit_module_hook;
    PyObject *undo = hooked ? PyObject_CallOneArg(jit_module_hook, j->submodules) : NULL;
    if (rng_before && (!hooked || undo)) result = PyObject_Call(j->fn, pargs, pkwargs);
    if (undo && undo != Py_None) {
      PyObject *et, *ev, *tb;
      PyErr_Fetch(&et, &ev, &tb);
      PyObject *r = PyObject_CallNoArgs(undo);
      Py_XDECREF(r);
      if (et)
        PyErr_Restore(et, ev, tb);
      else if (!r)
        Py_CLEAR(result);
    }
    Py_XDECREF(undo);
  }
  if (mode) exit_mode(mode, &result);
  Py_XDECREF(mode);
  if (result && pyth_rng_unchanged(rng_before) < 0) Py_CLEAR(result);
  Py_XDECREF(rng_before);
  return result;
}

/* the return value ends the initial trace; the final versions of inputs updated in place travel with
 * it (data dependence) */
static int record_return(trace_ctx *c, PyObject *result) {
  th_trace *initial = c->tr.trace;
  pyth_pool pool = {0};
  th_arg ret;
  int rc = pyth_to_arg(&c->tr, result, &ret, &pool, "the jitted function's return value");
  int nin = th_trace_num_inputs(initial), nup = 0;
  th_value **upd = rc == 0 ? pyth_pool_alloc(&pool, sizeof(th_value *) * (size_t)(nin + 1)) : NULL;
  if (rc == 0 && !upd) rc = -1;
  PyObject *candidates = rc == 0 ? PyList_New(0) : NULL;
  if (candidates) {
    PyObject *lifted = PyDict_Values(c->tr.lifted_ids);
    if (!lifted || PyList_SetSlice(candidates, 0, 0, c->inputs) < 0 ||
        PyList_SetSlice(candidates, PyList_GET_SIZE(candidates), PyList_GET_SIZE(candidates), lifted) < 0)
      rc = -1;
    Py_XDECREF(lifted);
    for (Py_ssize_t i = 0; rc == 0 && i < PyList_GET_SIZE(candidates); i++) {
      th_value *now = ((pyth_proxy *)PyList_GET_ITEM(candidates, i))->value;
      bool is_input = false;
      for (int k = 0; k < nin && !is_input; k++) is_input = th_trace_input(initial, k) == now;
      bool seen = false;
      for (int k = 0; k < nup && !seen; k++) seen = upd[k] == now;
      if (!is_input && !seen && nup < nin) upd[nup++] = now;
    }
    Py_DECREF(candidates);
  } else {
    rc = -1;
  }
  th_status st = rc == 0 ? th_trace_set_return_updated(initial, ret, nup, upd) : TH_OK;
  pyth_pool_free(&pool);
  if (rc < 0) return -1;
  if (st != TH_OK) return pyth_raise(st), -1;
  return 0;
}

/* The float8 trace (*f8, NULL when nothing converts) of the verified initial trace: torchao's
 * Float8Linear modules and inlined float8 functions (marks), then jit's own float8= option. The filter
 * sees module parameters by their qualified names ("fc1.weight"; a ThunderModule's own "_model." prefix
 * left out, as its state_dict does). */
static int apply_float8(pyth_jit *j, const pyth_entry *e, trace_ctx *c, const th_trace *initial, th_trace **f8) {
  *f8 = NULL;
  Py_CLEAR(j->float8.param_names);
  if (j->is_module && e->param_input && (j->float8.param_names = PyDict_New())) {
    const bool wrapper = PyObject_HasAttrString(j->fn, "_thunder_jit");
    for (Py_ssize_t s = 0; s < PyList_GET_SIZE(j->slots); s++) {
      int ix = e->param_input[s];
      const char *nm = ix >= 0 && ix < th_trace_num_inputs(initial) ? th_value_name(th_trace_input(initial, ix)) : NULL;
      PyObject *q = PyTuple_GET_ITEM(PyList_GET_ITEM(j->slots, s), 2);
      const char *qs = wrapper ? PyUnicode_AsUTF8(q) : NULL;
      PyObject *qn = qs && !strncmp(qs, "_model.", 7) ? PyUnicode_FromString(qs + 7) : Py_NewRef(q);
      if (!qn || (nm && PyDict_SetItemString(j->float8.param_names, nm, qn) < 0)) {
        Py_XDECREF(qn);
        return -1;
      }
      Py_DECREF(qn);
    }
  }
  th_trace *marked = NULL;
  if (PyErr_Occurred() || pyth_float8_apply_marks(&c->tr, initial, j->float8.param_names, &marked) < 0) return -1;
  if (!j->float8.enabled) {
    *f8 = marked;
    return 0;
  }
  int rc = pyth_float8_apply(&j->float8, marked ? marked : initial, f8);
  th_trace_free(marked);
  return rc;
}

/* The stage trace `name` of program p, else `fallback`. */
static const th_trace *stage_or(const th_program *p, const char *name, const th_trace *fallback) {
  for (int i = 0; i < th_program_num_traces(p); i++) {
    const char *n = NULL;
    const th_trace *t = th_program_stage_trace(p, i, &n);
    if (n && !strcmp(n, name)) return t;
  }
  return fallback;
}

/* Compiles the initial trace (c's, taken into the entry) [after float8]: the core's pipeline, or under
 * autograd its stages before the execution pass, the grad transform and both halves (autograd.c). */
static int compile_traced(pyth_jit *j, pyth_entry *e, trace_ctx *c, const tensor_list *tl) {
  th_trace *initial = c->tr.trace;
  e->traces[e->ntraces++] = initial;
  c->tr.trace = NULL;
  th_trace *f8 = NULL;
  if (j->float8.enabled || c->tr.float8_marks) {
    th_status st = th_trace_verify(initial);
    if (st != TH_OK) return pyth_raise(st), -1;
    if (apply_float8(j, e, c, initial, &f8) < 0) return -1;
    if (f8) e->traces[e->ntraces++] = f8;
  }
  const th_trace *pre = f8 ? f8 : initial;
  th_compile_options o = compile_options(j);
  /* autograd: grad enabled and an input requires grad -> the grad transform's forward and backward */
  int nin = th_trace_num_inputs(pre);
  bool *rg = PyMem_Calloc((size_t)(nin ? nin : 1), sizeof(bool));
  int on = rg ? grad_inputs(j, e, tl, nin, rg) : (PyErr_NoMemory(), -1);
  const th_trace *drawn = pre; /* the trace whose random ops eager PyTorch would draw for */
  if (on > 0) {
    th_trace *dce = NULL, *cse = NULL;
    th_status st = th_compile_prepare(pre, &o, &dce, &cse);
    if (st != TH_OK) {
      pyth_raise(st);
      on = -1;
    } else {
      e->traces[e->ntraces++] = dce;
      e->traces[e->ntraces++] = cse;
      drawn = cse;
    }
    if (on > 0 && c->tr.grad_stops) {
      PyErr_SetString(PyExc_NotImplementedError,
                      "thunder_c: detach(), .data and torch.no_grad() inside a jitted function are not supported "
                      "when it is differentiated (inputs or parameters require grad): the grad transform has no "
                      "stop-gradient yet; move them out of the jitted function, or call it under torch.no_grad()");
      on = -1;
    }
    if (on > 0 && pyth_grad_compile(cse, rg, &o, &e->prog, &e->grad) < 0) on = -1;
  } else if (on == 0) {
    th_status st = th_program_compile(pre, &o, &e->prog);
    if (st != TH_OK) {
      pyth_raise(st);
      on = -1;
    } else {
      drawn = stage_or(e->prog, "cse", pre);
    }
  }
  PyMem_Free(rg);
  if (on < 0) return -1;
  /* the random stream of every call comes from torch's default generator (rng.c) */
  e->rng_draws = th_program_num_random_ops(e->prog) > 0 ? pyth_rng_eager_draws(drawn) : 0;
  return 0;
}

/* Puts the module back: its attributes as the snapshot has them, its parameters as *saved, keeping the
 * pending exception. */
static void restore_module(const pyth_jit *j, PyObject *saved, PyObject *snapshots) {
  PyObject *et, *ev, *tb;
  if (snapshots) {
    PyErr_Fetch(&et, &ev, &tb);
    restore_module_attributes(snapshots, NULL, NULL);
    PyErr_Restore(et, ev, tb);
  }
  if (saved) {
    PyErr_Fetch(&et, &ev, &tb);
    for (Py_ssize_t s = 0; s < PyList_GET_SIZE(saved); s++) {
      PyObject *t = PyList_GET_ITEM(saved, s);
      PyObject *slot = PyList_GET_ITEM(j->slots, s);
      if (t) PyDict_SetItem(PyTuple_GET_ITEM(slot, 0), PyTuple_GET_ITEM(slot, 1), t);
    }
    PyErr_Clear();
    PyErr_Restore(et, ev, tb);
  }
}

pyth_entry *jit_compile_entry(pyth_jit *j, PyObject *args, PyObject *kwargs, const tensor_list *tl) {
  pyth_entry *e = entry_new();
  if (!e) return NULL;
  if (j->given_trace) {
    if (compile_given(j, e, tl) < 0) Py_CLEAR(e);
    return e;
  }
  if (check_default_dtype() < 0) {
    Py_DECREF(e);
    return NULL;
  }
  trace_ctx c;
  PyObject *pargs = NULL, *pkwargs = NULL, *result = NULL, *saved = NULL, *snapshots = NULL;
  pyth_tracer *prev = pyth_active;
  int rc = tracer_open(&c, e);
  if (rc == 0) rc = proxify_arguments(j, e, &c, args, kwargs, &pargs, &pkwargs);
  if (rc == 0 && j->is_module) rc = proxify_module_state(j, e, &c, &saved);
  if (rc == 0) rc = join_input_aliases(j, e, &c, tl);
  if (rc == 0 && j->is_module && !(snapshots = snapshot_module(j))) rc = -1;
  pyth_active = &c.tr;
  if (rc == 0 && !(result = call_traced(j, pargs, pkwargs))) rc = -1;
  if (rc == 0 && PyDict_Check(result) && !PyDict_CheckExact(result)) e->ret_type = Py_NewRef(Py_TYPE(result));
  if (rc == 0 && snapshots) rc = record_writes(e, snapshots, &result);
  if (rc == 0) rc = record_return(&c, result);
  pyth_active = prev;
  pyth_autocast_clear(&c.tr);
  if (rc == 0) rc = compile_traced(j, e, &c, tl);
  restore_module(j, saved, snapshots);
  Py_XDECREF(snapshots);
  Py_XDECREF(saved);
  Py_XDECREF(result);
  Py_XDECREF(pargs);
  Py_XDECREF(pkwargs);
  tracer_close(&c);
  if (rc < 0) Py_CLEAR(e);
  return e;
}
