/* tensor_proxy.c — the TensorProxy type: what a jitted function holds in place of each tensor while it
 * is traced. Its metadata (shape, dtype, device, stride(), numel(), ...) are plain Python values read
 * from the trace value it stands for; its Tensor methods and Python operators record ops through the
 * dispatch table (dispatch.c) and pyth_record (proxy.c); a value that only exists at run time
 * (Tensor.item, bool(tensor)) cannot be read and raises. */
#include <stddef.h>
#include <string.h>

#include "proxy.h"

/* ---- proxies ------------------------------------------------------------------------------------ */

PyObject *pyth_proxy_new(pyth_tracer *tr, th_value *v) {
  pyth_proxy *p = PyObject_New(pyth_proxy, &pyth_proxy_type);
  if (!p) return NULL;
  memcpy(p->torch_payload, pyth_T.stand_in_words, sizeof p->torch_payload);
  p->value = v;
  p->tracer = tr;
  p->epoch = tr->epoch;
  p->weakrefs = NULL;
  return (PyObject *)p;
}

bool pyth_proxy_live(const pyth_proxy *p) {
  return pyth_active && p->tracer == pyth_active && p->epoch == pyth_active->epoch;
}

th_value *pyth_proxy_value(PyObject *o) {
  pyth_proxy *p = (pyth_proxy *)o;
  if (!pyth_proxy_live(p)) { /* its value may be freed with its trace: do not read it */
    PyErr_SetString(PyExc_RuntimeError,
                    "thunder_c: a TensorProxy was used outside the trace that made it (a proxy only "
                    "exists while thunder_c.jit traces the function; do not keep it after the call)");
    return NULL;
  }
  return p->value;
}

static void proxy_dealloc(PyObject *o) {
  if (((pyth_proxy *)o)->weakrefs) PyObject_ClearWeakRefs(o);
  PyObject_Free(o);
}

static PyObject *proxy_repr(PyObject *o) {
  pyth_proxy *p = (pyth_proxy *)o;
  if (!pyth_proxy_live(p)) return PyUnicode_FromString("<TensorProxy (expired: its trace has ended)>");
  char dev[32], buf[160];
  th_device_str(th_value_device(p->value), dev, sizeof dev);
  int n = snprintf(buf, sizeof buf, "<TensorProxy %s: %s %s[", th_value_name(p->value) ? th_value_name(p->value) : "?",
                   dev, th_dtype_short(th_value_dtype(p->value)));
  for (int i = 0; i < th_value_ndim(p->value) && n < (int)sizeof buf - 24; i++)
    n += snprintf(buf + n, sizeof buf - (size_t)n, "%s%lld", i ? ", " : "", (long long)th_value_shape(p->value)[i]);
  snprintf(buf + n, sizeof buf - (size_t)n, "]>");
  return PyUnicode_FromString(buf);
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
  th_value *v = pyth_proxy_value(o);
  if (!v) return NULL;
  PyObject *t = shape_tuple(v);
  if (!t) return NULL;
  PyObject *s = PyObject_CallOneArg(pyth_T.size_type, t);
  Py_DECREF(t);
  return s;
}

static PyObject *proxy_dtype(PyObject *o, void *c) {
  (void)c;
  th_value *v = pyth_proxy_value(o);
  if (!v) return NULL;
  th_dtype d = th_value_dtype(v);
  return Py_NewRef(pyth_T.dtypes[d] ? pyth_T.dtypes[d] : pyth_dtypes[d]);
}

static PyObject *proxy_device(PyObject *o, void *c) {
  (void)c;
  th_value *v = pyth_proxy_value(o);
  return v ? pyth_device_to_torch(th_value_device(v)) : NULL;
}

static PyObject *proxy_ndim(PyObject *o, void *c) {
  (void)c;
  th_value *v = pyth_proxy_value(o);
  return v ? PyLong_FromLong(th_value_ndim(v)) : NULL;
}

static PyObject *proxy_false(PyObject *o, void *c) {
  (void)c;
  return pyth_proxy_value(o) ? Py_NewRef(Py_False) : NULL;
}

static PyObject *proxy_none(PyObject *o, void *c) {
  (void)c;
  return pyth_proxy_value(o) ? Py_NewRef(Py_None) : NULL;
}

static PyObject *proxy_is_cpu(PyObject *o, void *c) {
  (void)c;
  th_value *v = pyth_proxy_value(o);
  return v ? PyBool_FromLong(th_value_device(v).type == TH_CPU) : NULL;
}

static PyObject *proxy_is_cuda(PyObject *o, void *c) {
  (void)c;
  th_value *v = pyth_proxy_value(o);
  return v ? PyBool_FromLong(th_value_device(v).type == TH_CUDA) : NULL;
}

static PyObject *proxy_name(PyObject *o, void *c) {
  (void)c;
  th_value *v = pyth_proxy_value(o);
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
  if (!pyth_proxy_value(o)) return NULL;
  return PyObject_GetAttrString(pyth_T.torch, "strided");
}

static PyObject *proxy_data(PyObject *o, void *c) {
  (void)c;
  if (!pyth_proxy_value(o)) return NULL;
  ((pyth_proxy *)o)->tracer->grad_stops++; /* no gradient flows through: see autograd.c */
  return Py_NewRef(o);
}

/* Records op `qualname` on (self, extra...) */
static PyObject *record_on(PyObject *self, const char *qualname, const char *display, PyObject *extra) {
  unsigned fl = 0;
  pyth_qualname_flags(qualname, &fl);
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
  th_value *v = pyth_proxy_value(o);
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

/* H and mH: the conjugate transposes; thunder-c's tensors are real, so they are T (0-D or 2-D only, as
 * PyTorch's check) and mT. */
static PyObject *proxy_H(PyObject *o, void *c) {
  th_value *v = pyth_proxy_value(o);
  if (!v) return NULL;
  int nd = th_value_ndim(v);
  if (nd != 0 && nd != 2)
    return PyErr_Format(PyExc_RuntimeError, "tensor.H is only supported on matrices (2-D tensors). Got %d-D tensor.",
                        nd);
  return proxy_T(o, c);
}

static PyObject *proxy_mH(PyObject *o, void *c) { return proxy_mT(o, c); }

static int dim_arg(th_value *v, PyObject *d, int *out) {
  long k = PyLong_AsLong(d);
  if (k == -1 && PyErr_Occurred()) return -1;
  int nd = th_value_ndim(v), n = nd ? nd : 1;
  if (k < -n || k >= n) {
    PyErr_Format(PyExc_IndexError, "Dimension out of range (expected to be in range of [%d, %d], but got %ld)", -n,
                 n - 1, k);
    return -1;
  }
  *out = (int)(k < 0 ? k + n : k);
  return 0;
}

static PyObject *proxy_size(PyObject *o, PyObject *args, PyObject *kw) {
  static char *kwl[] = {"dim", NULL};
  PyObject *d = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:size", kwl, &d)) return NULL;
  th_value *v = pyth_proxy_value(o);
  if (!v) return NULL;
  if (d == Py_None) return proxy_shape(o, NULL);
  int k;
  if (dim_arg(v, d, &k) < 0) return NULL;
  return PyLong_FromLongLong(th_value_ndim(v) ? th_value_shape(v)[k] : 1);
}

static PyObject *proxy_storage_offset(PyObject *o, PyObject *unused) {
  (void)unused;
  return pyth_proxy_value(o) ? PyLong_FromLong(0) : NULL;
}

static PyObject *proxy_stride(PyObject *o, PyObject *args, PyObject *kw) {
  static char *kwl[] = {"dim", NULL};
  PyObject *d = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:stride", kwl, &d)) return NULL;
  th_value *v = pyth_proxy_value(o);
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
  th_value *v = pyth_proxy_value(o);
  return v ? PyLong_FromLongLong(th_value_numel(v)) : NULL;
}

static PyObject *proxy_element_size(PyObject *o, PyObject *unused) {
  (void)unused;
  th_value *v = pyth_proxy_value(o);
  return v ? PyLong_FromSize_t(th_dtype_size(th_value_dtype(v))) : NULL;
}

static PyObject *proxy_is_floating_point(PyObject *o, PyObject *unused) {
  (void)unused;
  th_value *v = pyth_proxy_value(o);
  return v ? PyBool_FromLong(th_dtype_is_float(th_value_dtype(v))) : NULL;
}

static PyObject *proxy_true(PyObject *o, PyObject *args, PyObject *kw) {
  (void)args;
  (void)kw;
  return pyth_proxy_value(o) ? Py_NewRef(Py_True) : NULL;
}

static PyObject *proxy_false_m(PyObject *o, PyObject *unused) {
  (void)unused;
  return pyth_proxy_value(o) ? Py_NewRef(Py_False) : NULL;
}

/* detach() and cpu() on a CPU proxy: the tensor itself (no autograd graph is recorded yet). */
static PyObject *proxy_self(PyObject *o, PyObject *args, PyObject *kw) {
  (void)args;
  (void)kw;
  th_value *v = pyth_proxy_value(o);
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
  th_value *v = pyth_proxy_value(o);
  if (!v) return NULL;
  return PyErr_Format(PyExc_NotImplementedError,
                      "thunder_c: %s needs the values of tensor %s, which are not known while tracing "
                      "(data-dependent Python control flow is not supported)",
                      what, th_value_name(v)),
         NULL;
}

static PyObject *proxy_item(PyObject *o, PyObject *u) {
  (void)u;
  return data_dependent(o, "Tensor.item()");
}
static PyObject *proxy_tolist(PyObject *o, PyObject *u) {
  (void)u;
  return data_dependent(o, "Tensor.tolist()");
}
static PyObject *proxy_numpy(PyObject *o, PyObject *u) {
  (void)u;
  return data_dependent(o, "Tensor.numpy()");
}
static PyObject *proxy_data_ptr(PyObject *o, PyObject *u) {
  (void)u;
  return data_dependent(o, "Tensor.data_ptr()");
}

static PyObject *proxy_tf(PyObject *cls, PyObject *const *args, Py_ssize_t nargs) {
  (void)cls;
  return pyth_torch_function(NULL, args, nargs);
}

static PyMethodDef proxy_methods[] = {
  {"size", (PyCFunction)(void (*)(void))proxy_size, METH_VARARGS | METH_KEYWORDS, "Shape (torch.Size), or one extent."},
  {"stride", (PyCFunction)(void (*)(void))proxy_stride, METH_VARARGS | METH_KEYWORDS,
   "Strides of a contiguous tensor of this shape."},
  {"dim", proxy_dim, METH_NOARGS, "Number of dimensions."},
  {"ndimension", proxy_dim, METH_NOARGS, "Number of dimensions."},
  {"numel", proxy_numel, METH_NOARGS, "Number of elements."},
  {"nelement", proxy_numel, METH_NOARGS, "Number of elements."},
  {"element_size", proxy_element_size, METH_NOARGS, "Bytes per element."},
  {"is_floating_point", proxy_is_floating_point, METH_NOARGS, "True for floating dtypes."},
  {"is_complex", proxy_false_m, METH_NOARGS, "False: thunder_c has no complex dtypes."},
  {"is_contiguous", (PyCFunction)(void (*)(void))proxy_true, METH_VARARGS | METH_KEYWORDS,
   "True: proxies are contiguous."},
  {"storage_offset", proxy_storage_offset, METH_NOARGS, "0: proxies are contiguous tensors of their own."},
  {"detach", (PyCFunction)(void (*)(void))proxy_detach, METH_VARARGS | METH_KEYWORDS,
   "The tensor itself (no autograd graph is recorded)."},
  {"cpu", (PyCFunction)(void (*)(void))proxy_self, METH_VARARGS | METH_KEYWORDS,
   "The tensor itself (proxies are on the CPU)."},
  {"item", proxy_item, METH_NOARGS, "Not available while tracing (data-dependent)."},
  {"tolist", proxy_tolist, METH_NOARGS, "Not available while tracing (data-dependent)."},
  {"numpy", proxy_numpy, METH_NOARGS, "Not available while tracing (data-dependent)."},
  {"data_ptr", proxy_data_ptr, METH_NOARGS, "Not available while tracing."},
  {"__torch_function__", (PyCFunction)(void (*)(void))proxy_tf, METH_FASTCALL | METH_CLASS,
   "Routes torch calls to the tracer."},
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
  {"H", proxy_H, NULL, "the conjugate transpose of a matrix (T: the tensors are real)", NULL},
  {"mH", proxy_mH, NULL, "the conjugate transpose of the last two dimensions (mT: the tensors are real)", NULL},
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
  if (name && pyth_is_random_factory(name))
    return PyErr_Format(PyExc_NotImplementedError, "%U is not supported by thunder_c: " PYTH_RANDOM_UNSUPPORTED, self);
  return PyErr_Format(PyExc_NotImplementedError, "%U is not supported by thunder_c", self);
}
static PyMethodDef unsupported_def = {"unsupported", (PyCFunction)(void (*)(void))unsupported_call,
                                      METH_VARARGS | METH_KEYWORDS, NULL};

static PyObject *proxy_getattro(PyObject *o, PyObject *name) {
  PyObject *r = PyObject_GenericGetAttr(o, name);
  if (r || !PyErr_ExceptionMatches(PyExc_AttributeError)) return r;
  PyErr_Clear();
  if (pyth_dispatch_init() < 0) return NULL;
  PyObject *op = PyDict_GetItemWithError(pyth_methods, name);
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
  pyth_qualname_flags(qualname, &fl);
  PyObject *args = PyTuple_Pack(2, a, b);
  if (!args) return NULL;
  PyObject *r = pyth_record(qualname, display, fl, args, NULL);
  Py_DECREF(args);
  return r;
}

static PyObject *unary(const char *qualname, const char *display, PyObject *a) {
  unsigned fl = 0;
  pyth_qualname_flags(qualname, &fl);
  PyObject *args = PyTuple_Pack(1, a);
  if (!args) return NULL;
  PyObject *r = pyth_record(qualname, display, fl, args, NULL);
  Py_DECREF(args);
  return r;
}

/* In-place operators: the op the table maps Tensor.__iadd__ (...) to. */
static PyObject *inplace(const char *dunder, PyObject *a, PyObject *b) {
  if (pyth_dispatch_init() < 0) return NULL;
  pyth_op *op = (pyth_op *)PyDict_GetItemString(pyth_methods, dunder);
  if (!op)
    return PyErr_Format(PyExc_NotImplementedError, "torch.Tensor.%s is not supported by thunder_c", dunder), NULL;
  PyObject *args = PyTuple_Pack(2, a, b);
  if (!args) return NULL;
  PyObject *r = pyth_op_call_args(op, args, NULL);
  Py_DECREF(args);
  return r;
}

#define BIN(fn, q, d)                                                                                                  \
  static PyObject *fn(PyObject *a, PyObject *b) { return binary(q, d, a, b); }
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
#define IBIN(fn, d)                                                                                                    \
  static PyObject *fn(PyObject *a, PyObject *b) { return inplace(d, a, b); }
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
static PyObject *nb_pos(PyObject *a) { return pyth_proxy_value(a) ? Py_NewRef(a) : NULL; }
static int nb_bool(PyObject *a) {
  data_dependent(a, "bool(tensor)");
  return -1;
}
static PyObject *nb_int(PyObject *a) { return data_dependent(a, "int(tensor)"); }
static PyObject *nb_float(PyObject *a) { return data_dependent(a, "float(tensor)"); }

static PyNumberMethods proxy_number = {
  .nb_add = nb_add,
  .nb_subtract = nb_sub,
  .nb_multiply = nb_mul,
  .nb_remainder = nb_mod,
  .nb_power = nb_pow,
  .nb_negative = nb_neg,
  .nb_positive = nb_pos,
  .nb_absolute = nb_abs,
  .nb_bool = nb_bool,
  .nb_invert = nb_invert,
  .nb_and = nb_and,
  .nb_xor = nb_xor,
  .nb_or = nb_or,
  .nb_int = nb_int,
  .nb_float = nb_float,
  .nb_inplace_add = nb_iadd,
  .nb_inplace_subtract = nb_isub,
  .nb_inplace_multiply = nb_imul,
  .nb_inplace_remainder = nb_imod,
  .nb_inplace_power = nb_ipow,
  .nb_inplace_and = nb_iand,
  .nb_inplace_xor = nb_ixor,
  .nb_inplace_or = nb_ior,
  .nb_floor_divide = nb_floordiv,
  .nb_true_divide = nb_truediv,
  .nb_inplace_floor_divide = nb_ifloordiv,
  .nb_inplace_true_divide = nb_itruediv,
  .nb_index = nb_int,
  .nb_matrix_multiply = nb_matmul,
};

static PyObject *proxy_richcompare(PyObject *a, PyObject *b, int op) {
  static const char *const q[] = {"ltorch.lt", "ltorch.le", "ltorch.eq", "ltorch.ne", "ltorch.gt", "ltorch.ge"};
  static const char *const d[] = {"torch.Tensor.__lt__", "torch.Tensor.__le__", "torch.Tensor.__eq__",
                                  "torch.Tensor.__ne__", "torch.Tensor.__gt__", "torch.Tensor.__ge__"};
  if (Py_TYPE(a) != &pyth_proxy_type && !PyObject_TypeCheck(b, &pyth_proxy_type)) Py_RETURN_NOTIMPLEMENTED;
  return binary(q[op], d[op], a, b);
}

static PyObject *proxy_subscript(PyObject *a, PyObject *key) {
  return binary("ltorch.getitem", "torch.Tensor.__getitem__", a, key);
}

/* An index entry of advanced indexing (a tensor, a sequence, a bool): x[key] is then a copy, not a view. */
static bool is_advanced_entry(PyObject *k) {
  if (Py_TYPE(k) == &pyth_proxy_type) {
    th_value *v = pyth_proxy_value(k);
    return v && th_value_is_tensor(v);
  }
  return PyBool_Check(k) || PyList_Check(k) || PyTuple_Check(k) ||
         PyObject_TypeCheck(k, (PyTypeObject *)pyth_T.tensor_type) ||
         (pyth_T.numpy_ndarray && PyObject_TypeCheck(k, (PyTypeObject *)pyth_T.numpy_ndarray));
}

static bool is_advanced_key(PyObject *key) {
  if (!PyTuple_Check(key)) return is_advanced_entry(key);
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(key); i++)
    if (is_advanced_entry(PyTuple_GET_ITEM(key, i))) return true;
  return false;
}

/* x[key] = v: the view x[key] updated in place (copy_ of a tensor, fill_ of a number); x and its other
 * aliases then read the update (see "aliasing" above). An advanced key (tensors, lists, bools) selects a
 * copy, so x itself is updated: ltorch.setitem_(x, key, v). */
static int proxy_ass_subscript(PyObject *a, PyObject *key, PyObject *v) {
  if (!pyth_proxy_value(a)) return -1;
  if (!v) return PyErr_SetString(PyExc_TypeError, "tensors do not support item deletion"), -1;
  if (is_advanced_key(key)) {
    unsigned fl = 0;
    pyth_qualname_flags("ltorch.setitem_", &fl);
    PyObject *args = PyTuple_Pack(3, a, key, v);
    if (!args) return -1;
    PyObject *r = pyth_record("ltorch.setitem_", "torch.Tensor.__setitem__", fl, args, NULL);
    Py_DECREF(args);
    Py_XDECREF(r);
    return r ? 0 : -1;
  }
  PyObject *view = proxy_subscript(a, key);
  if (!view) return -1;
  bool tensor = Py_TYPE(v) == &pyth_proxy_type || PyObject_TypeCheck(v, (PyTypeObject *)pyth_T.tensor_type);
  PyObject *r = binary(tensor ? "ltorch.copy_" : "ltorch.fill_", "torch.Tensor.__setitem__", view, v);
  Py_DECREF(view);
  Py_XDECREF(r);
  return r ? 0 : -1;
}

static Py_ssize_t proxy_len(PyObject *a) {
  th_value *v = pyth_proxy_value(a);
  if (!v) return -1;
  if (th_value_ndim(v) == 0) return PyErr_SetString(PyExc_TypeError, "len() of a 0-d tensor"), -1;
  return (Py_ssize_t)th_value_shape(v)[0];
}

static PyMappingMethods proxy_mapping = {
  .mp_length = proxy_len, .mp_subscript = proxy_subscript, .mp_ass_subscript = proxy_ass_subscript};

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
  .tp_weaklistoffset = offsetof(pyth_proxy, weakrefs),
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
