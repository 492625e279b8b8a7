/* jit_run.c — running a cache entry's program on torch tensors (jit_internal.h), and DLPack both ways.
 *
 * Inputs cross into the core without a copy (arguments, then distinct module parameters, then captured
 * tensors) and outputs come back as torch tensors viewing the core's buffers (their DLPack capsule owns
 * them); an input the program updates in place is updated in the caller's tensor, because the core
 * writes into the caller's memory. Under autograd the entry's forward program runs behind thunder_c's
 * autograd.Function (autograd.c). */
#include <stdlib.h>
#include <string.h>

#include "jit_internal.h"

static void capsule_destructor(PyObject *cap) {
  if (PyCapsule_IsValid(cap, "dltensor")) {
    DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");
    if (m && m->deleter) m->deleter(m);
  } else {
    PyErr_Clear();
  }
}

/* A torch tensor viewing th_tensor t (which keeps one reference for the capsule); every dtype, bool and
 * fp8 included, crosses with its own DLPack code, so it comes back as torch's dtype with its bits. */
static PyObject *to_torch(th_tensor *t) {
  DLManagedTensor *m = th_tensor_to_dlpack(t);
  if (!m) return pyth_raise(th_last_status());
  PyObject *cap = PyCapsule_New(m, "dltensor", capsule_destructor);
  if (!cap) {
    m->deleter(m);
    return NULL;
  }
  PyObject *r = PyObject_CallOneArg(pyth_T.from_dlpack, cap);
  Py_DECREF(cap);
  return r;
}

/* DLPack both ways for thunder_c.extend's Python kernels (extend.c), as a run's outputs and inputs. */
PyObject *pyth_tensor_to_torch(th_tensor *t) { return to_torch(t); }

th_tensor *pyth_tensor_from_torch(PyObject *t) {
  PyObject *cap = NULL;
  DLManagedTensor *m = NULL;
  if (jit_export_tensor(t, NULL, &cap, &m) < 0) return NULL;
  th_tensor *r = th_tensor_from_dlpack(m);
  if (r) PyCapsule_SetName(cap, "used_dltensor"); /* r owns the export now */
  Py_DECREF(cap);
  if (!r) pyth_raise(th_last_status());
  return r;
}

static _Thread_local const th_trace *g_out_trace; /* the trace whose outputs build_output converts */
static _Thread_local PyObject *g_leaves;          /* tuple: tensor leaves to use instead (autograd) */
static _Thread_local Py_ssize_t g_leaf_k;

/* Rebuilds the return structure: one output tensor per leaf, in the program's order. */
static PyObject *build_output(const th_arg *a, th_tensor **outs, int nouts, int *k) {
  switch (a->kind) {
    case TH_ARG_TUPLE:
    case TH_ARG_LIST: {
      PyObject *r = a->kind == TH_ARG_TUPLE ? PyTuple_New(a->u.seq.n) : PyList_New(a->u.seq.n);
      for (int i = 0; r && i < a->u.seq.n; i++) {
        PyObject *x = build_output(&a->u.seq.items[i], outs, nouts, k);
        if (!x) return Py_DECREF(r), NULL;
        if (a->kind == TH_ARG_TUPLE)
          PyTuple_SET_ITEM(r, i, x);
        else
          PyList_SET_ITEM(r, i, x);
      }
      return r;
    }
    case TH_ARG_DICT: {
      PyObject *r = PyDict_New();
      for (int i = 0; r && i < a->u.seq.n; i++) {
        PyObject *x = build_output(&a->u.seq.items[i], outs, nouts, k);
        if (!x || PyDict_SetItemString(r, a->u.seq.keys[i], x) < 0) Py_CLEAR(r);
        Py_XDECREF(x);
      }
      return r;
    }
    default: break;
  }
  int i = (*k)++;
  th_tensor *t = i < nouts ? outs[i] : NULL;
  if (a->kind == TH_ARG_VALUE && th_value_is_tensor(a->u.value) && g_leaves) {
    if (g_leaf_k >= PyTuple_GET_SIZE(g_leaves))
      return PyErr_SetString(PyExc_RuntimeError, "thunder_c: internal error: too few output tensors"), NULL;
    return Py_NewRef(PyTuple_GET_ITEM(g_leaves, g_leaf_k++));
  }
  if (a->kind == TH_ARG_VALUE && th_value_is_tensor(a->u.value)) {
    if (!t) return PyErr_SetString(PyExc_RuntimeError, "thunder_c: the program produced no tensor for an output"), NULL;
    /* CSE may return one computed buffer for two outputs (return x * 2, x * 2); eager returns two
     * tensors, so the second is a copy. (An input returned twice stays one tensor, as in eager.) */
    bool again = false;
    for (int p = 0; p < i && !again; p++) again = outs[p] == t;
    if (again) {
      bool input = false;
      for (int q = 0; q < th_trace_num_inputs(g_out_trace) && !input; q++)
        input = th_trace_input(g_out_trace, q) == a->u.value;
      if (!input) {
        th_tensor *c = th_tensor_contiguous_copy(t);
        if (!c) return pyth_raise(th_last_status());
        PyObject *r = to_torch(c);
        th_tensor_release(c);
        return r;
      }
    }
    return to_torch(t);
  }
  if (a->kind == TH_ARG_VALUE || a->kind == TH_ARG_INT || a->kind == TH_ARG_FLOAT || a->kind == TH_ARG_BOOL) {
    if (t) {
      double f = th_tensor_get_f64(t, 0);
      th_dtype dt = th_tensor_dtype(t);
      if (dt == TH_BOOL) return PyBool_FromLong(f != 0);
      if (dt == TH_F64 || dt == TH_F32) return PyFloat_FromDouble(f);
      return PyLong_FromLongLong((long long)f);
    }
  }
  return pyth_from_arg(NULL, a);
}

PyObject *pyth_build_output(const th_trace *tr, const th_arg *a, th_tensor **outs, int nouts, PyObject *tensor_leaves) {
  int k = 0;
  g_out_trace = tr;
  g_leaves = tensor_leaves;
  g_leaf_k = 0;
  PyObject *r = build_output(a, outs, nouts, &k);
  g_leaves = NULL;
  return r;
}

/* A call under autograd: the caller's tensor of each program input (as jit_run_entry binds them), then the
 * forward program and autograd.Function (autograd.c). */
static PyObject *run_grad(pyth_jit *j, pyth_entry *e, tensor_list *tl, th_tensor **in, int nin) {
  PyObject **objs = PyMem_Calloc((size_t)(nin ? nin : 1), sizeof *objs);
  if (!objs) return PyErr_NoMemory();
  int nl = (int)PyList_GET_SIZE(e->lifted);
  for (int i = 0; i < tl->n; i++) {
    int ix = jit_tensor_input_index(j, e, i);
    if (ix >= 0 && ix < nin && !objs[ix]) objs[ix] = tl->t[i].tensor;
  }
  for (int i = 0; i < nl; i++) objs[nin - nl + i] = PyList_GET_ITEM(e->lifted, i);
  PyObject *res = NULL;
  for (int i = 0; i < nin; i++)
    if (!objs[i]) {
      PyErr_Format(PyExc_RuntimeError, "thunder_c: internal error: no tensor for input %d", i);
      goto done;
    }
  res = pyth_grad_run(e->grad, (PyObject *)e, e->prog, nin, in, objs);
done:
  PyMem_Free(objs);
  return res;
}

PyObject *jit_run_entry(pyth_jit *j, pyth_entry *e, tensor_list *tl) {
  int nin = e->prog ? th_program_num_inputs(e->prog) : 0; /* collection inputs (jit(backward)) by their leaves */
  int nargs = e->nargs_tensors, nparams = e->nparams_in, nl = (int)PyList_GET_SIZE(e->lifted);
  th_tensor *stack_in[16];
  th_tensor **in = nin <= 16 ? stack_in : PyMem_Calloc((size_t)nin, sizeof *in);
  PyObject *extra_caps = NULL;
  PyObject *res = NULL;
  th_tensor **outs = NULL;
  int nouts = 0, made = 0;
  if (!in) return PyErr_NoMemory();
  int expected = nargs + (j->is_module ? (int)PyList_GET_SIZE(j->slots) : 0);
  if (tl->n != expected) { /* cache="same input" with other inputs */
    PyErr_Format(PyExc_ValueError,
                 "thunder_c: this compiled program takes %d tensor arguments, got %d "
                 "(with cache='same input' the inputs must keep their structure)",
                 nargs, tl->n - (expected - nargs));
    goto done;
  }
  if (nargs + nparams + nl != nin) {
    PyErr_Format(PyExc_RuntimeError, "thunder_c: internal error: %d inputs expected, %d available", nin,
                 nargs + nparams + nl);
    goto done;
  }
  /* arguments, then distinct parameters (in slot order), then captured tensors */
  for (int i = 0; i < nargs; i++) {
    DLManagedTensor *m = tl->t[i].m;
    th_tensor *t = th_tensor_from_dlpack(m);
    if (!t) {
      pyth_raise(th_last_status());
      goto done;
    }
    PyCapsule_SetName(tl->t[i].capsule, "used_dltensor");
    in[made++] = t;
  }
  if (j->is_module) {
    Py_ssize_t ns = PyList_GET_SIZE(j->slots);
    for (Py_ssize_t s = 0; s < ns; s++) {
      int idx = e->param_input[s];
      if (idx < 0 || idx != made) continue; /* shared or None */
      call_tensor *c = &tl->t[nargs + (int)s];
      th_tensor *t = th_tensor_from_dlpack(c->m);
      if (!t) {
        pyth_raise(th_last_status());
        goto done;
      }
      PyCapsule_SetName(c->capsule, "used_dltensor");
      in[made++] = t;
    }
  }
  if (nl) {
    extra_caps = PyList_New(0);
    for (int i = 0; extra_caps && i < nl; i++) {
      PyObject *cap = NULL;
      DLManagedTensor *m = NULL;
      if (jit_export_tensor(PyList_GET_ITEM(e->lifted, i), NULL, &cap, &m) < 0) goto done;
      th_tensor *tt = th_tensor_from_dlpack(m);
      if (!tt) {
        if (m) pyth_raise(th_last_status());
        Py_XDECREF(cap);
        goto done;
      }
      PyCapsule_SetName(cap, "used_dltensor");
      Py_DECREF(cap);
      in[made++] = tt;
    }
    if (!extra_caps) goto done;
  }
  if (made != nin) {
    PyErr_Format(PyExc_RuntimeError, "thunder_c: internal error: made %d of %d inputs", made, nin);
    goto done;
  }
  if (e->rng_draws > 0 && pyth_rng_begin(e->prog, e->rng_draws) < 0) goto done;
  if (e->grad) { /* under autograd: the forward program behind thunder_c's autograd.Function */
    res = run_grad(j, e, tl, in, nin);
    goto done;
  }
  th_status st = th_program_run(e->prog, nin, in, &nouts, &outs);
  if (st != TH_OK) {
    pyth_raise(st);
    goto done;
  }
  th_arg ret = th_trace_output(th_program_trace(e->prog));
  int k = 0;
  g_out_trace = th_program_trace(e->prog);
  res = build_output(&ret, outs, nouts, &k);
done:
  for (int i = 0; i < made; i++) th_tensor_release(in[i]);
  if (in != stack_in) PyMem_Free(in);
  for (int i = 0; i < nouts; i++) th_tensor_release(outs[i]);
  free(outs);
  Py_XDECREF(extra_caps);
  return res;
}

bool jit_lifted_still_match(pyth_entry *e) {
  Py_ssize_t nl = PyList_GET_SIZE(e->lifted);
  if (!nl || !e->prog) return true;
  const th_trace *tr = th_program_trace(e->prog);
  int base = th_trace_num_inputs(tr) - (int)nl;
  for (Py_ssize_t i = 0; i < nl; i++) {
    PyObject *t = PyList_GET_ITEM(e->lifted, i);
    const th_value *v = th_trace_input(tr, base + (int)i);
    PyObject *dt = PyObject_GetAttr(t, jit_s.dtype), *shape = PyObject_GetAttrString(t, "shape");
    th_dtype d;
    bool ok = dt && shape && pyth_dtype_from(dt, &d) && d == th_value_dtype(v) && PyTuple_Check(shape) &&
              PyTuple_GET_SIZE(shape) == th_value_ndim(v);
    for (int k = 0; ok && k < th_value_ndim(v); k++)
      ok = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, k)) == th_value_shape(v)[k];
    Py_XDECREF(dt);
    Py_XDECREF(shape);
    PyErr_Clear();
    if (!ok) return false;
  }
  return true;
}
