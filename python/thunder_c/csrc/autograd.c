/* autograd.c — jitted calls inside PyTorch's autograd: the forward and backward programs of the core's
 * grad transform (th_transform_grad) behind a torch.autograd.Function.
 *
 * When grad is enabled and a tensor input (or module parameter, or captured tensor) requires grad, the
 * jitted function's trace, cleaned by th_compile_prepare (verify, DCE, CSE), goes through
 * th_transform_grad, and each half is compiled from the execution pass on (TH_COMPILE_SKIP_DCE |
 * TH_COMPILE_SKIP_CSE): the forward program returns the function's outputs plus the values the
 * backward reads (saved for backward); the backward program maps those and one cotangent per output
 * tensor to one gradient per input. A call runs the forward program, then
 * calls thunder_c's autograd.Function (_ThunderFunction, a few lines of Python calling back here) with
 * the inputs that require grad, so the output tensors get a grad_fn; `loss.backward()` reaches its
 * backward, which runs the backward program on the saved values and the incoming gradients, and
 * PyTorch accumulates the results into `.grad` as it does for any node. Everything crosses by DLPack,
 * without copies.
 *
 * Saved tensors are kept by PyTorch's own mechanism (ctx.save_for_backward): a saved input is the
 * caller's tensor itself and a saved output the very output tensor, so an in-place change between
 * forward and backward raises PyTorch's version-counter error, and retain_graph behaves as in eager
 * (without it a second backward raises "Trying to backward through the graph a second time").
 * Outputs that are not floating or that are computed from no input requiring grad are marked
 * non-differentiable (requires_grad False, as eager gives for a function of
 * tensors that do not require grad). The backward program is not itself differentiable: a backward
 * with create_graph=True (double backward) raises RuntimeError. */
#include <string.h>

#include "pyth.h"

struct pyth_grad {
  th_trace *fwd_trace, *bwd_trace; /* owned: the grad transform's results */
  th_program *bwd;                 /* owned */
  th_grad_layout lay;
  int nin;              /* trace inputs (= forward program inputs) */
  bool *rg;             /* per input: differentiated (passed to the Function) */
  int *saved_src;       /* per saved tensor: input index j >= 0, -2 - k for flat output k, -1 */
  bool *nondiff;        /* per flat output */
  const th_arg *output; /* the 'output' entry of the forward's return (the user's structure) */
};

static PyObject *function_class; /* thunder_c._ThunderFunction, set by _set_autograd_function */
static PyObject *s_apply, *s_save_for_backward, *s_mark_non_differentiable, *s_saved_tensors, *s_call_attr;

void pyth_grad_free(pyth_grad *g) {
  if (!g) return;
  th_program_free(g->bwd);
  th_trace_free(g->fwd_trace);
  th_trace_free(g->bwd_trace);
  PyMem_Free(g->rg);
  PyMem_Free(g->saved_src);
  PyMem_Free(g->nondiff);
  PyMem_Free(g);
}

const th_trace *pyth_grad_forward_trace(const pyth_grad *g) { return g ? g->fwd_trace : NULL; }
const th_program *pyth_grad_backward_program(const pyth_grad *g) { return g ? g->bwd : NULL; }

PyObject *pyth_grad_backward_traces(const pyth_grad *g, PyObject *owner) {
  PyObject *l = PyList_New(0);
  const th_program *bwd = g ? g->bwd : NULL;
  for (int i = -1; l && i < th_program_num_traces(bwd); i++) { /* the grad transform's, then the stages */
    const th_trace *tr = i < 0 ? (g ? g->bwd_trace : NULL) : th_program_stage_trace(bwd, i, NULL);
    if (!tr) continue;
    PyObject *t = pyth_trace_wrap(tr, owner);
    if (!t || PyList_Append(l, t) < 0) Py_CLEAR(l);
    Py_XDECREF(t);
  }
  return l;
}

/* The parts of the forward's return: ({'output': o, 'flat_args': [...], 'flat_output': (...)}, ((saved
 * tensors), (saved numbers))); th_grad_forward_layout has checked the shape. */
static const th_arg *ret_part(const th_trace *fwd, int which) {
  static th_arg none; /* TH_ARG_NONE */
  th_arg r = th_trace_output(fwd);
  if (r.kind != TH_ARG_TUPLE || r.u.seq.n != 2) return &none;
  const th_arg *d = &r.u.seq.items[0], *s = &r.u.seq.items[1];
  switch (which) {
    case 0: return &d->u.seq.items[0];  /* output */
    case 1: return &d->u.seq.items[2];  /* flat_output */
    default: return &s->u.seq.items[0]; /* saved tensors */
  }
}

/* The largest th_value_id among `a`'s values, or `max`. */
static uint32_t arg_max_id(const th_arg *a, uint32_t max) {
  if (a->kind == TH_ARG_VALUE && a->u.value && th_value_id(a->u.value) > max) return th_value_id(a->u.value);
  if (a->kind == TH_ARG_TUPLE || a->kind == TH_ARG_LIST)
    for (int i = 0; i < a->u.seq.n; i++) max = arg_max_id(&a->u.seq.items[i], max);
  return max;
}

/* Whether `a` holds a value marked in `dep` (indexed by th_value_id). */
static bool arg_depends(const th_arg *a, const bool *dep) {
  if (a->kind == TH_ARG_VALUE) return a->u.value && dep[th_value_id(a->u.value)];
  if (a->kind == TH_ARG_TUPLE || a->kind == TH_ARG_LIST)
    for (int i = 0; i < a->u.seq.n; i++)
      if (arg_depends(&a->u.seq.items[i], dep)) return true;
  return false;
}

/* Marks in `dep` the floating tensors among `a`'s values (eager's autograd flows through those only). */
static void arg_mark(const th_arg *a, bool *dep) {
  if (a->kind == TH_ARG_VALUE && a->u.value && th_value_is_tensor(a->u.value) &&
      th_dtype_is_float(th_value_dtype(a->u.value)))
    dep[th_value_id(a->u.value)] = true;
  if (a->kind == TH_ARG_TUPLE || a->kind == TH_ARG_LIST)
    for (int i = 0; i < a->u.seq.n; i++) arg_mark(&a->u.seq.items[i], dep);
}

/* Per value id of the forward trace `tr` (of `max_id` + 1): whether it is a floating tensor computed
 * from an input that requires grad (rg). An output outside that set is non-differentiable, as eager
 * leaves an output that depends on no input requiring grad; one inside it keeps requires_grad even
 * when its gradient is zero (torch.floor), as eager does. NULL when out of memory. */
static bool *grad_dependents(const th_trace *tr, const bool *rg, int nin, uint32_t *max_id) {
  uint32_t max = 0;
  for (int j = 0; j < nin; j++)
    if (th_trace_input(tr, j) && th_value_id(th_trace_input(tr, j)) > max) max = th_value_id(th_trace_input(tr, j));
  for (int i = 0; i < th_trace_num_bsyms(tr); i++) {
    const th_bsym *b = th_trace_bsym(tr, i);
    th_arg o = th_bsym_output(b);
    max = arg_max_id(&o, max);
    for (int j = 0; j < th_bsym_num_args(b); j++) {
      th_arg x = th_bsym_arg(b, j);
      max = arg_max_id(&x, max);
    }
  }
  th_arg r = th_trace_output(tr);
  max = arg_max_id(&r, max);
  bool *dep = PyMem_Calloc((size_t)max + 1, sizeof(bool));
  if (!dep) return NULL;
  for (int j = 0; j < nin; j++)
    if (rg[j] && th_trace_input(tr, j)) dep[th_value_id(th_trace_input(tr, j))] = true;
  for (int i = 0; i < th_trace_num_bsyms(tr); i++) {
    const th_bsym *b = th_trace_bsym(tr, i);
    bool d = false;
    for (int j = 0; j < th_bsym_num_args(b) && !d; j++) {
      th_arg x = th_bsym_arg(b, j);
      d = arg_depends(&x, dep);
    }
    if (d) {
      th_arg o = th_bsym_output(b);
      arg_mark(&o, dep);
    }
  }
  *max_id = max;
  return dep;
}

int pyth_grad_compile(const th_trace *tr, const bool *requires_grad, const th_compile_options *o, th_program **fwd_prog,
                      pyth_grad **out) {
  *fwd_prog = NULL;
  *out = NULL;
  int nin = th_trace_num_inputs(tr);
  pyth_grad *g = PyMem_Calloc(1, sizeof *g);
  if (!g) return PyErr_NoMemory(), -1;
  g->nin = nin;
  g->rg = PyMem_Calloc((size_t)(nin ? nin : 1), sizeof(bool));
  if (!g->rg) goto nomem;
  memcpy(g->rg, requires_grad, (size_t)nin * sizeof(bool));
  th_grad_options go = {requires_grad, nin};
  /* tr is cleaned already (th_compile_prepare): each half from the execution pass on */
  th_compile_options split = *o;
  split.skip_stages |= TH_COMPILE_SKIP_DCE | TH_COMPILE_SKIP_CSE;
  th_status st = th_transform_grad(tr, &go, &g->fwd_trace, &g->bwd_trace);
  if (st == TH_OK) st = th_grad_forward_layout(g->fwd_trace, &g->lay);
  if (st == TH_OK) st = th_program_compile(g->bwd_trace, &split, &g->bwd);
  if (st == TH_OK) st = th_program_compile(g->fwd_trace, &split, fwd_prog);
  if (st != TH_OK) {
    pyth_raise(st);
    goto fail;
  }
  g->output = ret_part(g->fwd_trace, 0);
  const th_arg *flat = ret_part(g->fwd_trace, 1), *saved = ret_part(g->fwd_trace, 2);
  int nf = g->lay.nflat_output, ns = g->lay.nsaved_tensors;
  g->saved_src = PyMem_Calloc((size_t)(ns ? ns : 1), sizeof(int));
  g->nondiff = PyMem_Calloc((size_t)(nf ? nf : 1), sizeof(bool));
  if (!g->saved_src || !g->nondiff) goto nomem;
  /* where each saved tensor comes from: an input (save the caller's tensor), an output (save the very
   * output tensor), or an intermediate */
  for (int i = 0; i < ns; i++) {
    const th_value *v = saved->u.seq.items[i].kind == TH_ARG_VALUE ? saved->u.seq.items[i].u.value : NULL;
    g->saved_src[i] = -1;
    for (int j = 0; v && j < nin && g->saved_src[i] == -1; j++)
      if (th_trace_input(g->fwd_trace, j) == v) g->saved_src[i] = j;
    for (int k = 0; v && k < nf && g->saved_src[i] == -1; k++)
      if (flat->u.seq.items[k].kind == TH_ARG_VALUE && flat->u.seq.items[k].u.value == v) g->saved_src[i] = -2 - k;
  }
  /* non-differentiable outputs: not floating, fp8 (the grad transform gives fp8 values no cotangent, so
   * a gradient through one would be lost: PyTorch then says the output does not require grad), or the
   * backward does not read their cotangent */
  uint32_t max_id = 0;
  bool *dep = grad_dependents(g->fwd_trace, requires_grad, nin, &max_id);
  if (!dep) goto nomem;
  const th_value *cots = th_trace_num_inputs(g->bwd_trace) == 2 ? th_trace_input(g->bwd_trace, 1) : NULL;
  for (int k = 0; k < nf; k++) {
    const th_value *v = flat->u.seq.items[k].kind == TH_ARG_VALUE ? flat->u.seq.items[k].u.value : NULL;
    g->nondiff[k] = !v || !th_value_is_tensor(v) || !th_dtype_is_float(th_value_dtype(v)) ||
                    th_dtype_is_fp8(th_value_dtype(v)) ||
                    (cots && th_value_is_collection(cots) && !th_value_item(cots, k)) ||
                    (dep && th_value_id(v) <= max_id && !dep[th_value_id(v)]);
  }
  PyMem_Free(dep);
  *out = g;
  return 0;
nomem:
  PyErr_NoMemory();
fail:
  th_program_free(*fwd_prog);
  *fwd_prog = NULL;
  pyth_grad_free(g);
  return -1;
}

/* ---- one call: what the Function's forward hands to PyTorch, and what its backward needs ---------------- */

typedef struct {
  PyObject_HEAD PyObject *owner; /* the cache entry owning g (keeps the programs alive while the graph lives) */
  pyth_grad *g;
  PyObject *outputs;   /* tuple: the flat output tensors (handed to PyTorch by the Function's forward) */
  PyObject *saved;     /* tuple: the saved tensors (to ctx.save_for_backward) */
  PyObject *nondiff;   /* tuple: the outputs to mark non-differentiable */
  th_tensor **numbers; /* the saved numbers (0-dim tensors; owned) */
  int *apply_pos;      /* per trace input: its position among the Function's tensor arguments, or -1 */
  int napply;
} grad_call;

static void call_dealloc(PyObject *o) {
  grad_call *c = (grad_call *)o;
  PyObject_GC_UnTrack(o);
  Py_XDECREF(c->outputs);
  Py_XDECREF(c->saved);
  Py_XDECREF(c->nondiff);
  if (c->numbers)
    for (int i = 0; i < c->g->lay.nsaved_other; i++) th_tensor_release(c->numbers[i]);
  PyMem_Free(c->numbers);
  PyMem_Free(c->apply_pos);
  Py_XDECREF(c->owner);
  PyObject_GC_Del(o);
}

static int call_traverse(PyObject *o, visitproc visit, void *arg) {
  grad_call *c = (grad_call *)o;
  Py_VISIT(c->owner);
  Py_VISIT(c->outputs);
  Py_VISIT(c->saved);
  Py_VISIT(c->nondiff);
  return 0;
}

static int call_clear(PyObject *o) {
  grad_call *c = (grad_call *)o;
  Py_CLEAR(c->outputs);
  Py_CLEAR(c->saved);
  Py_CLEAR(c->nondiff);
  return 0;
}

static PyTypeObject call_type = {
  PyVarObject_HEAD_INIT(NULL, 0).tp_name = "thunder_c._GradCall",
  .tp_basicsize = sizeof(grad_call),
  .tp_dealloc = call_dealloc,
  .tp_traverse = call_traverse,
  .tp_clear = call_clear,
  .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
  .tp_doc = "internal: one jitted call's link to its backward program",
};

/* True if t shares storage with one of the n tensors of l (NULLs skipped). */
static bool shares_any(const th_tensor *t, th_tensor *const *l, int n) {
  for (int i = 0; i < n; i++)
    if (l[i] && l[i] != t && th_tensor_shares_storage(t, l[i])) return true;
  return false;
}

PyObject *pyth_grad_run(pyth_grad *g, PyObject *owner, th_program *fwd, int nin, th_tensor *const *in,
                        PyObject *const *in_objs) {
  if (!function_class)
    return PyErr_SetString(PyExc_RuntimeError, "thunder_c: internal error: the autograd Function is not registered"),
           NULL;
  if (nin != g->nin)
    return PyErr_Format(PyExc_RuntimeError, "thunder_c: internal error: %d inputs for a forward of %d", nin, g->nin);
  const th_grad_layout *L = &g->lay;
  int off_flat = L->noutput + L->nflat_args, off_saved = off_flat + L->nflat_output;
  int total = off_saved + L->nsaved_tensors + L->nsaved_other;
  th_tensor **outs = NULL;
  int nouts = 0;
  PyObject *res = NULL, *args = NULL, *fo = NULL;
  grad_call *c = NULL;
  th_status st = th_program_run(fwd, nin, in, &nouts, &outs);
  if (st != TH_OK) return pyth_raise(st);
  if (nouts != total) {
    PyErr_Format(PyExc_RuntimeError, "thunder_c: internal error: the forward program gave %d outputs, %d expected",
                 nouts, total);
    goto done;
  }
  c = PyObject_GC_New(grad_call, &call_type);
  if (!c) goto done;
  c->owner = Py_NewRef(owner);
  c->g = g;
  c->outputs = c->saved = c->nondiff = NULL;
  c->numbers = NULL;
  c->napply = 0;
  c->apply_pos = PyMem_Malloc(sizeof(int) * (size_t)(nin ? nin : 1));
  PyObject_GC_Track((PyObject *)c);
  if (!c->apply_pos) {
    PyErr_NoMemory();
    goto done;
  }
  for (int j = 0; j < nin; j++) c->apply_pos[j] = g->rg[j] ? c->napply++ : -1;
  if (L->nsaved_other) {
    c->numbers = PyMem_Calloc((size_t)L->nsaved_other, sizeof(th_tensor *));
    if (!c->numbers) {
      PyErr_NoMemory();
      goto done;
    }
    for (int i = 0; i < L->nsaved_other; i++) {
      c->numbers[i] = outs[off_saved + L->nsaved_tensors + i];
      if (c->numbers[i]) th_tensor_retain(c->numbers[i]);
    }
  }
  /* the flat outputs (a buffer returned twice becomes two tensors, as build_output does) */
  const th_arg *flat = ret_part(g->fwd_trace, 1);
  if (!(c->outputs = PyTuple_New(L->nflat_output))) goto done;
  int nnd = 0;
  for (int k = 0; k < L->nflat_output; k++) {
    th_tensor *t = outs[off_flat + k];
    if (!t) {
      PyErr_SetString(PyExc_RuntimeError, "thunder_c: internal error: the forward program produced no output tensor");
      goto done;
    }
    bool again = false, input = false;
    for (int p = 0; p < k && !again; p++) again = outs[off_flat + p] == t;
    const th_value *v = flat->u.seq.items[k].u.value;
    for (int q = 0; again && q < nin && !input; q++) input = th_trace_input(g->fwd_trace, q) == v;
    PyObject *x;
    if (again && !input) {
      th_tensor *cp = th_tensor_contiguous_copy(t);
      if (!cp) {
        pyth_raise(th_last_status());
        goto done;
      }
      x = pyth_tensor_to_torch(cp);
      th_tensor_release(cp);
    } else {
      x = pyth_tensor_to_torch(t);
    }
    if (!x) goto done;
    PyTuple_SET_ITEM(c->outputs, k, x);
    nnd += g->nondiff[k];
  }
  if (!(c->nondiff = PyTuple_New(nnd))) goto done;
  for (int k = 0, m = 0; k < L->nflat_output; k++)
    if (g->nondiff[k]) PyTuple_SET_ITEM(c->nondiff, m++, Py_NewRef(PyTuple_GET_ITEM(c->outputs, k)));
  /* the saved tensors: the caller's input, the output tensor itself, or a new view of the buffer */
  if (!(c->saved = PyTuple_New(L->nsaved_tensors))) goto done;
  for (int i = 0; i < L->nsaved_tensors; i++) {
    int src = g->saved_src[i];
    th_tensor *t = outs[off_saved + i];
    PyObject *x =
      src >= 0    ? Py_NewRef(in_objs[src])
      : src <= -2 ? Py_NewRef(PyTuple_GET_ITEM(c->outputs, -2 - src))
      : t         ? pyth_tensor_to_torch(t)
                  : (PyErr_SetString(PyExc_RuntimeError, "thunder_c: internal error: a saved tensor is missing"), NULL);
    if (!x) goto done;
    PyTuple_SET_ITEM(c->saved, i, x);
  }
  /* Function.apply(call, *inputs that require grad): the outputs get their grad_fn */
  if (!(args = PyTuple_New(1 + c->napply))) goto done;
  PyTuple_SET_ITEM(args, 0, Py_NewRef((PyObject *)c));
  for (int j = 0; j < nin; j++)
    if (c->apply_pos[j] >= 0) PyTuple_SET_ITEM(args, 1 + c->apply_pos[j], Py_NewRef(in_objs[j]));
  PyObject *apply = PyObject_GetAttr(function_class, s_apply);
  fo = apply ? PyObject_Call(apply, args, NULL) : NULL;
  Py_XDECREF(apply);
  if (!fo) goto done;
  if (!PyTuple_Check(fo) || PyTuple_GET_SIZE(fo) != L->nflat_output) {
    PyErr_SetString(PyExc_RuntimeError, "thunder_c: internal error: the autograd Function returned another structure");
    goto done;
  }
  res = pyth_build_output(g->fwd_trace, g->output, outs, L->noutput, fo);
done:
  if (c) { /* from now on PyTorch holds the outputs and saved tensors (ctx), the call only the numbers */
    Py_CLEAR(c->outputs);
    Py_CLEAR(c->saved);
    Py_CLEAR(c->nondiff);
    Py_DECREF(c);
  }
  Py_XDECREF(args);
  Py_XDECREF(fo);
  for (int i = 0; i < nouts; i++) th_tensor_release(outs[i]);
  free(outs);
  return res;
}

/* _autograd_forward(ctx, call): the body of _ThunderFunction.forward. */
static PyObject *m_autograd_forward(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  (void)self;
  if (nargs != 2 || Py_TYPE(args[1]) != &call_type)
    return PyErr_SetString(PyExc_TypeError, "_autograd_forward(ctx, call): internal to thunder_c"), NULL;
  PyObject *ctx = args[0];
  grad_call *c = (grad_call *)args[1];
  if (!c->outputs || !c->saved || !c->nondiff)
    return PyErr_SetString(PyExc_RuntimeError, "thunder_c: this call's forward has already run"), NULL;
  PyObject *save = PyObject_GetAttr(ctx, s_save_for_backward);
  PyObject *r = save ? PyObject_Call(save, c->saved, NULL) : NULL;
  Py_XDECREF(save);
  if (!r) return NULL;
  Py_DECREF(r);
  if (PyTuple_GET_SIZE(c->nondiff)) {
    PyObject *mark = PyObject_GetAttr(ctx, s_mark_non_differentiable);
    r = mark ? PyObject_Call(mark, c->nondiff, NULL) : NULL;
    Py_XDECREF(mark);
    if (!r) return NULL;
    Py_DECREF(r);
  }
  if (PyObject_SetAttr(ctx, s_call_attr, (PyObject *)c) < 0) return NULL;
  return Py_NewRef(c->outputs);
}

/* A th_tensor of zeros like value v (an output whose incoming gradient PyTorch left undefined). */
static th_tensor *zeros_like_value(const th_value *v) {
  th_tensor *t = th_tensor_new(th_value_dtype(v), th_value_ndim(v), th_value_shape(v));
  if (!t) pyth_raise(th_last_status());
  return t;
}

/* _autograd_backward(ctx, grads): the body of _ThunderFunction.backward; returns (None, grad per input
 * that was passed to the Function). */
static PyObject *m_autograd_backward(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  (void)self;
  if (nargs != 2 || !PyTuple_Check(args[1]))
    return PyErr_SetString(PyExc_TypeError, "_autograd_backward(ctx, grads): internal to thunder_c"), NULL;
  PyObject *ge = PyObject_CallNoArgs(pyth_T.is_grad_enabled);
  if (!ge) return NULL;
  bool create_graph = ge == Py_True;
  Py_DECREF(ge);
  if (create_graph)
    return PyErr_SetString(PyExc_RuntimeError,
                           "thunder_c: double backward is not supported: the backward of a jitted function is not "
                           "itself differentiable (backward or autograd.grad with create_graph=True); compute "
                           "higher-order gradients eagerly"),
           NULL;
  PyObject *co = PyObject_GetAttr(args[0], s_call_attr);
  if (!co) return NULL;
  if (Py_TYPE(co) != &call_type) {
    Py_DECREF(co);
    return PyErr_SetString(PyExc_TypeError, "_autograd_backward: internal to thunder_c"), NULL;
  }
  grad_call *c = (grad_call *)co;
  pyth_grad *g = c->g;
  const th_grad_layout *L = &g->lay;
  PyObject *grads = args[1], *res = NULL;
  PyObject *saved = PyObject_GetAttr(args[0], s_saved_tensors); /* PyTorch's error once freed */
  int nbin = L->nsaved_tensors + L->nsaved_other + L->nflat_output, made = 0, nouts = 0;
  th_tensor **in = PyMem_Calloc((size_t)(nbin ? nbin : 1), sizeof *in), **outs = NULL;
  if (!saved || !in) {
    if (saved) PyErr_NoMemory();
    goto done;
  }
  if (!PyTuple_Check(saved) || PyTuple_GET_SIZE(saved) != L->nsaved_tensors ||
      PyTuple_GET_SIZE(grads) != L->nflat_output) {
    PyErr_SetString(PyExc_RuntimeError, "thunder_c: internal error: saved tensors or gradients do not match");
    goto done;
  }
  for (int i = 0; i < L->nsaved_tensors; i++, made++)
    if (!(in[made] = pyth_tensor_from_torch(PyTuple_GET_ITEM(saved, i)))) goto done;
  for (int i = 0; i < L->nsaved_other; i++, made++) {
    in[made] = c->numbers[i];
    if (in[made]) th_tensor_retain(in[made]);
  }
  const th_value *cots = th_trace_input(g->bwd_trace, 1);
  const th_arg *flat = ret_part(g->fwd_trace, 1);
  for (int k = 0; k < L->nflat_output; k++, made++) {
    PyObject *gk = PyTuple_GET_ITEM(grads, k);
    bool used = th_value_is_collection(cots) && th_value_item(cots, k);
    if (gk != Py_None)
      in[made] = pyth_tensor_from_torch(gk);
    else if (used)
      in[made] = zeros_like_value(flat->u.seq.items[k].u.value);
    else
      continue;
    if (!in[made]) goto done;
  }
  th_status st = th_program_run(g->bwd, nbin, in, &nouts, &outs);
  if (st != TH_OK) {
    pyth_raise(st);
    goto done;
  }
  if (nouts != g->nin) {
    PyErr_Format(PyExc_RuntimeError, "thunder_c: internal error: the backward program gave %d gradients for %d inputs",
                 nouts, g->nin);
    goto done;
  }
  if (!(res = PyTuple_New(1 + c->napply))) goto done;
  PyTuple_SET_ITEM(res, 0, Py_NewRef(Py_None));
  for (int j = 0; j < g->nin; j++) {
    int p = c->apply_pos[j];
    if (p < 0) continue;
    th_tensor *t = outs[j];
    PyObject *x;
    if (!t) {
      x = Py_NewRef(Py_None);
    } else if (shares_any(t, in, nbin) || shares_any(t, outs, j)) {
      /* a gradient viewing an incoming gradient, a saved tensor or another gradient: PyTorch may keep it
       * as a .grad and accumulate into it in place, so it gets its own memory */
      th_tensor *cp = th_tensor_contiguous_copy(t);
      x = cp ? pyth_tensor_to_torch(cp) : pyth_raise(th_last_status());
      th_tensor_release(cp);
    } else {
      x = pyth_tensor_to_torch(t);
    }
    if (!x) {
      Py_CLEAR(res);
      goto done;
    }
    PyTuple_SET_ITEM(res, 1 + p, x);
  }
done:
  for (int i = 0; i < made; i++) th_tensor_release(in[i]);
  PyMem_Free(in);
  for (int i = 0; i < nouts; i++) th_tensor_release(outs[i]);
  free(outs);
  Py_XDECREF(saved);
  Py_DECREF(co);
  return res;
}

static PyObject *m_set_autograd_function(PyObject *self, PyObject *cls) {
  (void)self;
  Py_XSETREF(function_class, Py_NewRef(cls));
  Py_RETURN_NONE;
}

static PyMethodDef autograd_functions[] = {
  {"_autograd_forward", (PyCFunction)(void (*)(void))m_autograd_forward, METH_FASTCALL,
   "internal: _ThunderFunction.forward(ctx, call)"},
  {"_autograd_backward", (PyCFunction)(void (*)(void))m_autograd_backward, METH_FASTCALL,
   "internal: _ThunderFunction.backward(ctx, *grads)"},
  {"_set_autograd_function", m_set_autograd_function, METH_O,
   "internal: the torch.autograd.Function subclass that links jitted calls to autograd."},
  {NULL, NULL, 0, NULL},
};

int pyth_autograd_ready(PyObject *m) {
  if (PyType_Ready(&call_type) < 0) return -1;
  if (!(s_apply = PyUnicode_InternFromString("apply")) ||
      !(s_save_for_backward = PyUnicode_InternFromString("save_for_backward")) ||
      !(s_mark_non_differentiable = PyUnicode_InternFromString("mark_non_differentiable")) ||
      !(s_saved_tensors = PyUnicode_InternFromString("saved_tensors")) ||
      !(s_call_attr = PyUnicode_InternFromString("_thunder_call")))
    return -1;
  return PyModule_AddFunctions(m, autograd_functions);
}
