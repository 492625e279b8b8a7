"""thunder_c.extend: operators and executors written in Python, against PyTorch eager (the installed torch) as the reference.

Covers ops registered with like= and with meta= (schemas from signatures), an executor taking over a
built-in op (ltorch.gelu) with a Python kernel and a checker that refuses some calls (the next executor
runs them), autocast rules for a user op inside torch.autocast (bf16, as eager AMP), exceptions raised in
kernels, checkers, metas and rules reaching the caller as the very exception, kernels returning the
wrong thing, executor names (reserved, taken, freed), the cache (a hit still runs the Python kernel),
zero-copy tensors both ways, the thread kernels run on, re-entrant calls, and lifetimes (an executor
only a jitted function holds). The op registry is per process and ops are never removed, so every test
uses names of its own (prefix pyx)."""
import gc
import threading
import weakref

import pytest
import torch
import torch.nn.functional as F

from conftest import import_thunder_c

thunder_c = import_thunder_c()
extend = thunder_c.extend
TensorProxy = extend.TensorProxy


def executors_of(jfn, qualname):
    """The executors that claimed the top-level bsyms of op `qualname` in the last execution trace."""
    return [b.executor for b in thunder_c.last_traces(jfn)[-1].bound_symbols if b.qualname == qualname]


def counting(fn):
    """fn, counting its calls in .calls and remembering its last arguments in .last."""
    def k(*args, **kwargs):
        k.calls += 1
        k.last = (args, kwargs)
        return fn(*args, **kwargs)
    k.calls, k.last = 0, None
    return k


# ---- operators -------------------------------------------------------------------------------------

def test_like_op_records_and_runs_python_kernel():
    ex = extend.OperatorExecutor("pyx_like", version="0.1")
    kern = counting(lambda a, *, approximate="none": F.gelu(a, approximate=approximate))
    my_gelu = ex.register_operator("my_gelu", like=thunder_c.torch.gelu, fn=kern)
    assert my_gelu.qualname == "pyx_like.my_gelu" and my_gelu.schema.startswith("my_gelu(Tensor input, *, str approximate=")

    def f(x):
        return my_gelu(x, approximate="tanh") * 2 + my_gelu(x)

    jfn = thunder_c.jit(f, executors=[ex, "eager"])
    x = torch.randn(3, 5, dtype=torch.float64)
    want = F.gelu(x, approximate="tanh") * 2 + F.gelu(x)
    torch.testing.assert_close(jfn(x), want, rtol=0, atol=1e-15)
    assert kern.calls == 2
    assert {kw["approximate"] for _, kw in [kern.last]} <= {"none", "tanh"}
    text = str(thunder_c.last_traces(jfn)[-1])
    assert "pyx_like.my_gelu(x, approximate='tanh')" in text
    assert executors_of(jfn, "pyx_like.my_gelu") == ["pyx_like", "pyx_like"]
    # like= shares the meta: the output's metadata follows gelu's (a bf16 input gives a bf16 output)
    xb = torch.randn(4, dtype=torch.bfloat16)
    assert torch.equal(thunder_c.jit(lambda a: my_gelu(a), executors=[ex])(xb), F.gelu(xb))


def test_meta_op_schema_from_signature():
    ex = extend.OperatorExecutor("pyx_meta")

    def meta(x: torch.Tensor, w: torch.Tensor, *, alpha: float = 1.0) -> torch.Tensor:
        assert isinstance(x, TensorProxy) and isinstance(alpha, float)
        if x.shape[-1] != w.shape[-1]:
            raise ValueError(f"inner dims differ: {x.shape[-1]} vs {w.shape[-1]}")
        return TensorProxy(shape=(*x.shape[:-1], w.shape[0]), dtype=x.dtype)

    kern = counting(lambda x, w, *, alpha=1.0: alpha * (x @ w.t()))
    lin = ex.register_operator("scaled_linear", meta=meta, fn=kern)
    assert lin.schema == "scaled_linear(Tensor x, Tensor w, *, float alpha=1.0) -> Tensor"

    def two(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = x.shape[0] // 2
        return TensorProxy(like=x, shape=(h, *x.shape[1:])), TensorProxy(like=x, shape=(x.shape[0] - h, *x.shape[1:]))

    halves = ex.register_operator("halves", meta=two, fn=lambda x: (x[: x.shape[0] // 2].clone(), x[x.shape[0] // 2:].clone()))
    assert halves.schema == "halves(Tensor x) -> (Tensor, Tensor)"

    def f(x, w):
        a, b = halves(lin(x, w, alpha=0.5))
        return a.sum(0) - b.sum(0)

    jfn = thunder_c.jit(f, executors=[ex, "blas", "eager"])
    x, w = torch.randn(6, 4, dtype=torch.float64), torch.randn(3, 4, dtype=torch.float64)
    y = 0.5 * (x @ w.t())
    torch.testing.assert_close(jfn(x, w), y[:3].sum(0) - y[3:].sum(0), rtol=1e-12, atol=1e-12)
    assert kern.calls == 1
    assert executors_of(jfn, "pyx_meta.halves") == ["pyx_meta"]
    # the meta's own error is the caller's (at trace time)
    with pytest.raises(ValueError, match="inner dims differ: 4 vs 5"):
        thunder_c.jit(f, executors=[ex, "eager"])(x, torch.randn(3, 5, dtype=torch.float64))


def test_meta_returning_garbage_is_a_clear_error():
    ex = extend.OperatorExecutor("pyx_badmeta")
    bad = ex.register_operator("bad", meta=lambda x: 3, fn=lambda x: x)
    with pytest.raises(TypeError, match=r"pyx_badmeta.bad: its meta returned int; expected a thunder_c.extend.TensorProxy"):
        thunder_c.jit(lambda x: bad(x), executors=[ex])(torch.ones(2))
    two = ex.register_operator("two", meta=lambda x: (TensorProxy(like=x), TensorProxy(like=x)), fn=lambda x: x,
                               schema="two(Tensor x) -> Tensor")
    with pytest.raises(TypeError, match="its meta returned 2 outputs; its schema returns 1"):
        thunder_c.jit(lambda x: two(x), executors=[ex])(torch.ones(2))


# ---- an executor for a built-in op -------------------------------------------------------------------

def test_register_implementation_of_builtin_gelu():
    ex = extend.OperatorExecutor("pyx_gelu")
    kern = counting(lambda a, *, approximate="none": F.gelu(a, approximate=approximate))
    ex.register_implementation(thunder_c.torch.gelu, fn=kern)

    def f(x):
        return F.gelu(x) + 1

    x = torch.randn(8, 16)
    jfn = thunder_c.jit(f, executors=[ex, "blas", "eager"])
    # torch's own gelu ran: the result is bit-identical to eager
    assert torch.equal(jfn(x), f(x))
    assert kern.calls == 1
    assert executors_of(jfn, "ltorch.gelu") == ["pyx_gelu"]
    # not listed: the built-in path runs (gelu decomposed into prims run by eager)
    plain = thunder_c.jit(f)
    torch.testing.assert_close(plain(x), f(x))
    assert kern.calls == 1
    assert executors_of(plain, "ltorch.gelu") == []
    assert {b.executor for b in thunder_c.last_traces(plain)[-1].bound_symbols if b.executor} <= {"fuser", "eager",
                                                                                                 "blas"}


def test_checker_refuses_some_calls():
    ex = extend.OperatorExecutor("pyx_check")
    seen = []

    def checker(a, *, approximate):
        seen.append((type(a).__name__, a.dtype, tuple(a.shape), approximate))
        return a.dtype == torch.float32 and approximate == "none"

    kern = counting(lambda a, *, approximate: F.gelu(a, approximate=approximate))
    ex.register_implementation(thunder_c.torch.gelu, fn=kern, checker=checker)

    def f(x, y):
        return F.gelu(x), F.gelu(y), F.gelu(x, approximate="tanh")

    jfn = thunder_c.jit(f, executors=[ex, "eager"])
    x, y = torch.randn(5, 3), torch.randn(2, dtype=torch.float64)
    got = jfn(x, y)
    want = f(x, y)
    assert torch.equal(got[0], want[0])                      # ours: torch's kernel, exactly
    torch.testing.assert_close(got[1], want[1], rtol=1e-12, atol=1e-12)  # refused (f64): eager's decomposition
    torch.testing.assert_close(got[2], want[2])             # refused (tanh)
    assert kern.calls == 1
    assert ("TensorProxy", torch.float32, (5, 3), "none") in seen and ("TensorProxy", torch.float64, (2,), "none") in seen
    assert executors_of(jfn, "ltorch.gelu") == ["pyx_check"]
    assert "prims.erf" in [b.qualname for b in thunder_c.last_traces(jfn)[-1].bound_symbols]


def test_implementation_through_a_registered_op_and_by_name():
    ex = extend.register_executor(extend.OperatorExecutor("pyx_named"))
    assert extend.get_executor("pyx_named") is ex and ex in extend.get_all_executors()
    kern = counting(lambda a, b: torch.mul(a, b))
    my_mul = ex.register_operator("my_mul", like=thunder_c.prims.mul, fn=kern)
    ex.register_implementation(thunder_c.prims.mul, my_mul,
                               checker=lambda a, b: isinstance(b, TensorProxy) and a.shape == b.shape)
    f = lambda a, b: thunder_c.prims.mul(a, b) + thunder_c.prims.mul(a, 2.0)  # noqa: E731
    jfn = thunder_c.jit(f, executors=["pyx_named", "eager"])
    a, b = torch.randn(4), torch.randn(4)
    assert torch.equal(jfn(a, b), a * b + a * 2.0)
    assert kern.calls == 1  # the scalar mul was refused by the checker
    assert executors_of(jfn, "prims.mul") == ["pyx_named", "eager"]
    extend.deregister_executor(ex)
    assert extend.get_executor("pyx_named") is None
    with pytest.raises(ValueError, match="no registered executor named 'pyx_named'"):
        extend.deregister_executor("pyx_named")  # twice
    with pytest.raises(ValueError, match="built-in"):
        extend.deregister_executor("eager")
    with pytest.raises(TypeError, match="OperatorExecutor or its name"):
        extend.deregister_executor(5)


# ---- autocast ------------------------------------------------------------------------------------------

def _linear_meta(x, w):
    return TensorProxy(like=x, shape=(*x.shape[:-1], w.shape[0]))


def test_autocast_rule_of_a_user_op_matches_eager_amp():
    ex = extend.OperatorExecutor("pyx_amp")
    seen = []
    lin = ex.register_operator("lin", meta=_linear_meta, fn=lambda x, w: F.linear(x, w))

    @ex.register_autocast_rule(lin)
    def rule(x, w, *, dtype, device_type):
        seen.append((dtype, device_type))
        return {"x": dtype, "w": dtype}

    lin_policy = ex.register_operator("lin_policy", meta=_linear_meta, fn=lambda x, w: F.linear(x, w), autocast="lower")
    lin_plain = ex.register_operator("lin_plain", meta=_linear_meta, fn=lambda x, w: F.linear(x, w))
    x, w = torch.randn(16, 16), torch.randn(8, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = F.linear(x, w)  # eager AMP: bf16
        jfn = thunder_c.jit(lambda x, w: lin(x, w), executors=[ex, "eager"])
        got = jfn(x, w)
        got_policy = thunder_c.jit(lambda x, w: lin_policy(x, w), executors=[ex, "eager"])(x, w)
        got_plain = thunder_c.jit(lambda x, w: lin_plain(x, w), executors=[ex, "eager"])(x, w)
    assert want.dtype == torch.bfloat16
    assert got.dtype == torch.bfloat16 and torch.equal(got, want)
    assert got_policy.dtype == torch.bfloat16 and torch.equal(got_policy, want)
    assert got_plain.dtype == torch.float32  # no rule: not autocast
    assert seen == [(torch.bfloat16, "cpu")]
    text = str(thunder_c.last_traces(jfn)[-1])
    assert "prims.convert_element_type(x, dtypes.bfloat16)" in text and "pyx_amp.lin(t0, t1)" in text
    # a rule returning one entry per parameter (None: leave it); outside a region it is not called. The
    # kernel runs with torch's autocast off (Thunder's @no_autocast), so it sees exactly what the trace says
    calls = []
    extend.register_autocast_rule(lin_plain, lambda x, w, *, dtype, device_type: calls.append(1) or (dtype, None))
    jp = thunder_c.jit(lambda x, w: lin_plain(x, w), executors=[ex, "eager"])
    assert jp(x, w).dtype == torch.float32 and calls == []
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with pytest.raises(RuntimeError, match="(?i)dtype|scalar type"):  # bf16 x, f32 w: torch's linear refuses
            jp(x, w)
    assert calls == [1]


def test_autocast_rule_errors():
    ex = extend.OperatorExecutor("pyx_amperr")
    lin = ex.register_operator("lin", meta=_linear_meta, fn=lambda x, w: F.linear(x, w))
    x, w = torch.randn(4, 4), torch.randn(4, 4)
    ex.register_autocast_rule(lin, lambda x, w, *, dtype, device_type: {"nope": dtype})
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with pytest.raises(ValueError, match="its autocast rule names 'nope', which is not a parameter"):
            thunder_c.jit(lambda x, w: lin(x, w), executors=[ex])(x, w)
    err = KeyError("rule failed")

    def raising(x, w, *, dtype, device_type):
        raise err

    ex.register_autocast_rule(lin, raising)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with pytest.raises(KeyError) as e:
            thunder_c.jit(lambda x, w: lin(x, w), executors=[ex])(x, w)
    assert e.value is err
    with pytest.raises(ValueError, match="parameter named 'dtype'"):
        ex.register_operator("cast", meta=lambda x, dtype: x, fn=lambda x, dtype: x.to(dtype),
                             autocast=lambda x, dtype, *, device_type: None)


# ---- errors --------------------------------------------------------------------------------------------

def test_kernel_exception_reaches_the_caller_unchanged():
    ex = extend.OperatorExecutor("pyx_raise")
    raised = []

    def kern(a):
        if (a < 0).any():
            e = ValueError("negative input")
            raised.append(e)
            raise e
        return a.sqrt()

    op = ex.register_operator("safe_sqrt", like=thunder_c.torch.sqrt, fn=kern)
    jfn = thunder_c.jit(lambda a: op(a) + 1, executors=[ex, "eager"])
    with pytest.raises(ValueError, match="^negative input$") as e:
        jfn(-torch.ones(3))
    assert e.value is raised[0]
    # the traceback goes through the kernel
    assert any(fr.name == "kern" for fr in __import__("traceback").extract_tb(e.value.__traceback__))
    # nothing is left broken: the next call (a cache hit) runs
    assert torch.equal(jfn(torch.full((3,), 4.0)), torch.full((3,), 3.0))
    assert (thunder_c.cache_hits(jfn), thunder_c.cache_misses(jfn)) == (1, 1)


def test_checker_exception_reaches_the_caller():
    ex = extend.OperatorExecutor("pyx_checkraise")
    err = LookupError("checker says no")

    def checker(a, *, approximate):
        raise err

    ex.register_implementation("ltorch.gelu", fn=lambda a, *, approximate: F.gelu(a), checker=checker)
    with pytest.raises(LookupError) as e:
        thunder_c.jit(lambda a: F.gelu(a), executors=[ex, "eager"])(torch.ones(2))
    assert e.value is err


def test_kernel_returning_the_wrong_thing():
    ex = extend.OperatorExecutor("pyx_wrong")
    shape = ex.register_operator("shape", like=thunder_c.torch.neg, fn=lambda a: torch.zeros(a.shape[0] + 1))
    dtype = ex.register_operator("dtype", like=thunder_c.torch.neg, fn=lambda a: torch.zeros(a.shape, dtype=torch.float64))
    kind = ex.register_operator("kind", like=thunder_c.torch.neg, fn=lambda a: 3.0)
    x = torch.ones(4)
    with pytest.raises(RuntimeError, match=r"pyx_wrong.shape: .*f32\[5\].*f32\[4\]"):
        thunder_c.jit(lambda a: shape(a), executors=[ex])(x)
    with pytest.raises(RuntimeError, match=r"pyx_wrong.dtype: .*f64\[4\].*f32\[4\]"):
        thunder_c.jit(lambda a: dtype(a), executors=[ex])(x)
    with pytest.raises(TypeError, match="pyx_wrong.kind: the Python kernel of executor 'pyx_wrong' returned float"):
        thunder_c.jit(lambda a: kind(a), executors=[ex])(x)


def test_executor_names():
    for name in ("fuser", "blas", "eager"):
        with pytest.raises(ValueError, match=f"an executor named '{name}' is already registered"):
            extend.OperatorExecutor(name)
    with pytest.raises(ValueError, match="invalid executor name"):
        extend.OperatorExecutor("my-ex")
    a = extend.OperatorExecutor("pyx_dup")
    with pytest.raises(ValueError, match="an executor named 'pyx_dup' is already registered"):
        extend.OperatorExecutor("pyx_dup")
    del a
    gc.collect()
    b = extend.OperatorExecutor("pyx_dup")  # freed with its object: the name is free again
    assert b.name == "pyx_dup"
    b.register_operator("f", like=thunder_c.torch.neg, fn=lambda a: -a)
    with pytest.raises(ValueError, match="op 'pyx_dup.f' is already registered"):
        b.register_operator("f", like=thunder_c.torch.neg, fn=lambda a: -a)
    b.register_implementation(thunder_c.torch.neg, fn=lambda a: -a)
    with pytest.raises(ValueError, match="executor 'pyx_dup' already implements ltorch.neg"):
        b.register_implementation(thunder_c.torch.neg, fn=lambda a: -a)


# ---- runs: cache, zero copy, threads, re-entry, lifetime -------------------------------------------------

def test_cache_hit_still_runs_the_python_kernel_zero_copy():
    ex = extend.OperatorExecutor("pyx_cache")
    ptrs = []

    def kern(a, b):
        out = a * b + 1
        ptrs.append((a.data_ptr(), b.data_ptr(), out.data_ptr()))
        return out

    op = ex.register_operator("fma1", like=thunder_c.prims.mul, fn=kern)
    jfn = thunder_c.jit(lambda a, b: op(a, b), executors=[ex])
    a, b = torch.randn(1000), torch.randn(1000)
    for i in range(3):
        y = jfn(a, b)
        assert torch.equal(y, a * b + 1)
        # the kernel saw the caller's memory, and the caller got the kernel's tensor back (no copies)
        assert ptrs[-1] == (a.data_ptr(), b.data_ptr(), y.data_ptr())
    assert len(ptrs) == 3
    assert (thunder_c.cache_hits(jfn), thunder_c.cache_misses(jfn)) == (2, 1)


def test_aliasing_output_is_copied_for_a_non_view_op():
    ex = extend.OperatorExecutor("pyx_alias")
    ident = ex.register_operator("ident", like=thunder_c.torch.neg, fn=lambda a: a)
    jfn = thunder_c.jit(lambda a: ident(a), executors=[ex])
    x = torch.arange(4.0)
    y = jfn(x)
    assert torch.equal(y, x) and y.data_ptr() != x.data_ptr()


def test_kernel_runs_on_the_calling_thread_with_the_gil():
    ex = extend.OperatorExecutor("pyx_thread")
    where = []

    def kern(a):
        where.append(threading.get_ident())
        return a + 1

    op = ex.register_operator("inc", like=thunder_c.torch.neg, fn=kern)
    jfn = thunder_c.jit(lambda a: op(a), executors=[ex])
    x = torch.zeros(3)
    jfn(x)
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("y", jfn(x)))
    t.start()
    t.join()
    assert where == [threading.get_ident(), t.ident]
    assert torch.equal(out["y"], torch.ones(3))


def test_reentrant_call_is_refused():
    ex = extend.OperatorExecutor("pyx_reenter")
    box = {}

    def kern(a):
        return box["jfn"](a)  # the same program, while it runs

    op = ex.register_operator("again", like=thunder_c.torch.neg, fn=kern)
    box["jfn"] = thunder_c.jit(lambda a: op(a), executors=[ex])
    with pytest.raises(RuntimeError, match="already running"):
        box["jfn"](torch.ones(2))


def test_executor_lives_as_long_as_the_jitted_function():
    def make():
        ex = extend.OperatorExecutor("pyx_life")
        op = ex.register_operator("twice", like=thunder_c.torch.neg, fn=lambda a: a * 2)
        return thunder_c.jit(lambda a: op(a), executors=[ex]), weakref.ref(ex)

    jfn, ref = make()
    gc.collect()
    assert ref() is not None  # the jitted function holds it
    assert torch.equal(jfn(torch.ones(2)), torch.full((2,), 2.0))
    del jfn
    gc.collect()
    assert ref() is None  # and only it: the name is free again
    extend.OperatorExecutor("pyx_life")


def test_executor_by_name_pinned_by_its_program():
    def make():
        ex = extend.OperatorExecutor("pyx_pin")  # not registered: found by name while it lives
        kern = counting(lambda a: -a)
        ex.register_implementation(thunder_c.torch.neg, fn=kern)
        return ex, kern

    jfn = thunder_c.jit(lambda a: -a, executors=["pyx_pin", "eager"])  # holds only the name
    with pytest.raises(ValueError, match="Expected an Executor or the name of a registered Executor"):
        jfn(torch.ones(2))  # no such executor (yet)
    ex, kern = make()
    assert torch.equal(jfn(torch.ones(2)), -torch.ones(2)) and kern.calls == 1
    ref = weakref.ref(ex)
    del ex
    gc.collect()
    assert ref() is None  # the Python object is gone ...
    with pytest.raises(ValueError, match="already registered"):
        extend.OperatorExecutor("pyx_pin")  # ... but the compiled program keeps its executor (and name)
    assert torch.equal(jfn(torch.ones(2)), -torch.ones(2)) and kern.calls == 2
    del jfn
    gc.collect()
    extend.OperatorExecutor("pyx_pin")  # released with the last program using it


def test_bad_arguments():
    ex = extend.OperatorExecutor("pyx_args")
    with pytest.raises(ValueError, match="give either like= or meta="):
        ex.register_operator("f", fn=lambda a: a)
    with pytest.raises(TypeError, match="fn .* must be callable"):
        ex.register_operator("f", like=thunder_c.torch.neg, fn=None)
    with pytest.raises(ValueError, match="unknown op 'ltorch.nope'"):
        ex.register_implementation("ltorch.nope", fn=lambda a: a)
    with pytest.raises(TypeError, match="give the kernel"):
        ex.register_implementation(thunder_c.torch.neg)
    with pytest.raises(ValueError, match="unknown tag"):
        ex.register_operator("g", like=thunder_c.torch.neg, fn=lambda a: a, tags=("inplace",))
    with pytest.raises(RuntimeError, match="can only be called inside a function compiled with thunder_c.jit"):
        ex.register_operator("h", like=thunder_c.torch.neg, fn=lambda a: -a)(torch.ones(1))


def test_python_example_runs():
    """examples/python/user_executor.py checks itself against eager and exits 0 only if it matches."""
    import os
    import subprocess
    import sys

    from conftest import PYTHON_DIR, SOURCE_DIR
    env = dict(os.environ, PYTHONPATH=str(PYTHON_DIR))
    r = subprocess.run([sys.executable, str(SOURCE_DIR / "examples" / "python" / "user_executor.py")], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "t2 = pyex.bias_gelu(t1, b1)" in r.stdout and "ltorch.softmax       run by pyex" in r.stdout


# ---- the thread count compiled programs run on --------------------------------------------------------

def team_size_recorder(name):
    """A user executor whose op `twice` records the OpenMP team size it runs under (libgomp's
    omp_get_max_threads(), shared with torch): (executor, op, list of sizes seen)."""
    import ctypes
    gomp = ctypes.CDLL("libgomp.so.1")
    ex = extend.OperatorExecutor(name)
    seen = []

    def kern(a):
        seen.append(gomp.omp_get_max_threads())
        return a * 2

    return ex, ex.register_operator("twice", like=thunder_c.torch.neg, fn=kern), seen


def test_num_threads_independent_of_torch():
    """thunder_c.set_num_threads governs the OpenMP team of a run whatever torch.set_num_threads says
    (both share libgomp): a kernel reads libgomp's omp_get_max_threads() during the run; torch's own
    setting is back after it."""
    import ctypes
    gomp = ctypes.CDLL("libgomp.so.1")
    ex, twice, seen = team_size_recorder("pyx_threads")
    jfn = thunder_c.jit(lambda x: twice(x) + 1, executors=[ex, "eager"])
    x = torch.arange(4.0)
    old_torch = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        thunder_c.set_num_threads(3)
        assert thunder_c.get_num_threads() == 3
        torch.testing.assert_close(jfn(x), x * 2 + 1)
        assert seen[-1] == 3
        assert torch.get_num_threads() == 1 and gomp.omp_get_max_threads() == 1
        thunder_c.set_num_threads(2)
        jfn(x)
        assert seen[-1] == 2
        with pytest.raises(ValueError, match=r"set_num_threads: n: expected 0 \(the default\) or a count in \[1, 4096\], but got -2"):
            thunder_c.set_num_threads(-2)
        with pytest.raises(ValueError, match=r"^set_num_threads: n: .* but got -1$"):
            thunder_c.set_num_threads(-1)
        with pytest.raises(ValueError, match="but got 4097"):
            thunder_c.set_num_threads(4097)
        with pytest.raises(ValueError, match="but got 100000000000000000000"):
            thunder_c.set_num_threads(10**20)
        with pytest.raises(TypeError, match="set_num_threads: n: expected an int, but got float"):
            thunder_c.set_num_threads(2.0)
        assert thunder_c.get_num_threads() == 2
        import numpy as np
        thunder_c.set_num_threads(np.int64(1))  # any integer (__index__)
        assert thunder_c.get_num_threads() == 1
    finally:
        thunder_c.set_num_threads(0)
        torch.set_num_threads(old_torch)
    assert thunder_c.get_num_threads() >= 1


def test_default_team_capped_by_the_cpus_other_processes_leave_free(monkeypatch):
    """Under the default thread count a run's team is capped by the CPUs other processes leave free:
    with more busy processes than CPUs it is one thread; a count set with set_num_threads is used as
    given, and THUNDER_ADAPTIVE_THREADS=0 keeps the default uncapped."""
    import os
    import signal
    import time
    ex, twice, seen = team_size_recorder("pyx_free_cpus")
    jfn = thunder_c.jit(lambda x: twice(x) + 1, executors=[ex, "eager"])
    x = torch.arange(4.0)
    monkeypatch.setenv("THUNDER_NUM_THREADS", "3")
    ncpu = len(os.sched_getaffinity(0))
    pids = []
    try:
        for _ in range(2 * ncpu + 1):  # busy processes: more than the CPUs, so none is free
            pid = os.fork()
            if pid == 0:
                while True:
                    pass
            pids.append(pid)
        time.sleep(0.1)
        for _ in range(4):  # a count holds for two samples, 10 ms apart, before it caps
            time.sleep(0.02)
            torch.testing.assert_close(jfn(x), x * 2 + 1)
        assert seen[-2:] == [1, 1]
        # a process of many threads is not scanned thread by thread: its own count is estimated
        gate = threading.Event()
        idle = [threading.Thread(target=gate.wait) for _ in range(80)]
        for t in idle:
            t.start()
        try:
            for _ in range(3):
                time.sleep(0.02)
                jfn(x)
            assert seen[-1] == 1
        finally:
            gate.set()
            for t in idle:
                t.join()
        for off in ("0", "off", "False"):
            monkeypatch.setenv("THUNDER_ADAPTIVE_THREADS", off)
            jfn(x)
            assert seen[-1] == 3
        monkeypatch.delenv("THUNDER_ADAPTIVE_THREADS")
        thunder_c.set_num_threads(3)
        jfn(x)
        assert seen[-1] == 3
    finally:
        thunder_c.set_num_threads(0)
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
