"""thunder_c.dynamo.ThunderCompiler, the torch.compile backend, against PyTorch eager as the reference.

Each test compiles a model with `torch.compile(model, backend=ThunderCompiler())` and runs the same
code eagerly on a deep copy (same initial parameters, same inputs): outputs, gradients after
loss.backward() and parameters after optimizer steps must match. Covered: an MLP (one thunder-c region,
forward and backward), ops thunder-c lacks (split out to eager regions with their reasons, a tuple
result keeping its getitems), graph breaks (print, .item()), data-dependent control flow, global-state
nodes (torch.no_grad and torch.autocast blocks inside forward), a buffer updated in place, a region
whose thunder-c call raises at run time (eager fallback), SGD training steps, a tiny Hugging Face
GPT-2 (forward + backward, greedy generate), the view attributes (x.mT) and API-usage logging (a
module built inside forward) Dynamo records, and the report's content."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from conftest import import_thunder_c

thunder_c = import_thunder_c()
from thunder_c import dynamo  # noqa: E402
from thunder_c.dynamo import ThunderCompiler  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()  # each test's graphs go to its own backend
    yield
    torch._dynamo.reset()


def R(*shape, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def close(got, want, what="", rtol=1e-5, atol=1e-5):
    assert got is not None, f"{what}: missing"
    torch.testing.assert_close(got, want, rtol=rtol, atol=atol, msg=lambda m: f"{what}: {m}")


def compiled_pair(make):
    """(eager model, torch.compile'd deep copy, its backend)."""
    torch.manual_seed(0)
    m = make()
    m2 = copy.deepcopy(m)
    be = ThunderCompiler()
    return m, torch.compile(m2, backend=be), m2, be


def check_grads(m, m2):
    for (n, p), (n2, p2) in zip(m.named_parameters(), m2.named_parameters()):
        assert n == n2
        close(p2.grad, p.grad, f"grad of {n}")


def kinds(info):
    return [r.kind for r in info.regions]


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(6, 16), nn.Linear(16, 3)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh")).softmax(-1)


def test_mlp_forward_backward_matches_eager():
    m, cm, m2, be = compiled_pair(MLP)
    x = R(4, 6)
    out, ref = cm(x), m(x)
    close(out, ref, "output")
    (out * R(4, 3, seed=1)).sum().backward()
    (ref * R(4, 3, seed=1)).sum().backward()
    check_grads(m, m2)
    (g,) = be.graphs
    assert kinds(g) == ["thunder-c"] and g.split_reasons == []
    region = g.regions[0]
    # the backward ran through thunder-c: the region's backward program exists
    assert thunder_c.last_backward_traces(region.jfn)
    # the trial trace compiled the program the real call reused
    assert thunder_c.cache_misses(region.jfn) == 1 and thunder_c.cache_hits(region.jfn) == 1


class WithFFT(nn.Module):
    """torch.fft.fft has no thunder-c op; .real of its complex result is refused by the trial trace
    (thunder-c has no complex dtypes); the rest runs in thunder-c."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(4, 8), nn.Linear(8, 4)

    def forward(self, x):
        y = torch.relu(self.fc1(x)) + 1
        y = torch.fft.fft(y).real * x.sum()
        return self.fc2(y).tanh()


def test_unsupported_op_is_split_out_with_its_reason():
    m, cm, m2, be = compiled_pair(WithFFT)
    x = R(3, 4)
    out, ref = cm(x), m(x)
    close(out, ref, "output")
    out.sum().backward()
    ref.sum().backward()
    check_grads(m, m2)
    (g,) = be.graphs
    assert kinds(g) == ["thunder-c", "eager", "thunder-c"]
    reasons = {s.target: s for s in g.split_reasons}
    fft = reasons["torch.fft.fft"]
    assert fft.reason_type == dynamo.MISSING_OP_SUPPORT and fft.info == "no thunder-c op for torch.fft.fft"
    real = reasons["getattr"]
    assert real.reason_type == dynamo.EXCEPTION_TRIAL_TRACE
    assert real.info.startswith("NotImplementedError:") and "complex64" in real.info
    assert g.regions[1].nodes == [fft.node, real.node]


def test_linalg_pinv_runs_in_eager():
    def f(a, b):
        return torch.linalg.pinv(a @ b) * 2

    be = ThunderCompiler()
    a, b = R(2, 3, 3), R(2, 3, 3, seed=1)
    close(torch.compile(f, backend=be)(a, b), f(a, b), "output")
    (g,) = be.graphs
    assert kinds(g) == ["thunder-c", "eager", "thunder-c"]
    (s,) = g.split_reasons
    assert (s.target, s.info) == ("torch.linalg.pinv", "no thunder-c op for torch.linalg.pinv")


@pytest.mark.parametrize("attr", ["T", "mT", "H", "mH"])
def test_view_attributes_run_in_thunder_c(attr):
    """Dynamo records x.mT (T, H, mH) as its aten op (torch.ops.aten.mT); the backend runs it as the
    attribute read, inside the thunder-c region, forward and backward."""
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            y = self.fc(x)  # (6, 4): T and H of a matrix
            if attr in ("mT", "mH"):
                y = y.reshape(2, 3, 4)  # a batch of matrices
            return getattr(y, attr) @ y

    m, cm, m2, be = compiled_pair(M)
    x = R(6, 4)
    out, ref = cm(x), m(x)
    close(out, ref, "output")
    out.sum().backward()
    ref.sum().backward()
    check_grads(m, m2)
    (g,) = be.graphs
    assert kinds(g) == ["thunder-c"] and g.split_reasons == []


def test_module_built_inside_forward_stays_in_one_region():
    """nn.Module.__init__ logs its API use (torch._C._log_api_usage_once), which Dynamo keeps in the
    graph; LitGPT's GPT.forward builds an nn.Identity this way. The call has no tensors and no effect on
    any value, so it does not split the region."""
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(4, 4), nn.Linear(4, 2)

        def forward(self, x):
            head = nn.Identity()
            return head(self.fc2(self.fc1(x).tanh()))

    m, cm, m2, be = compiled_pair(M)
    x = R(3, 4)
    out, ref = cm(x), m(x)
    close(out, ref, "output")
    out.sum().backward()
    ref.sum().backward()
    check_grads(m, m2)
    (g,) = be.graphs
    targets = [n.target for n in g.graph_module.graph.nodes]
    assert torch._C._log_api_usage_once in targets  # what Dynamo captured, kept in the thunder-c region
    assert kinds(g) == ["thunder-c"] and g.split_reasons == []


def test_graph_breaks_print_and_item():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(5, 5)

        def forward(self, x):
            y = self.fc(x).relu()
            print("between the graphs")
            s = y.sum().item()  # a graph break: the scalar leaves the graph
            return y * s + self.fc(y)

    m, cm, m2, be = compiled_pair(M)
    x = R(2, 5)
    out, ref = cm(x), m(x)
    close(out, ref, "output")
    out.sum().backward()
    ref.sum().backward()
    check_grads(m, m2)
    assert len(be.graphs) >= 2
    assert all(set(kinds(g)) == {"thunder-c"} for g in be.graphs)


def test_data_dependent_control_flow():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            y = self.fc(x)
            if y.sum() > 0:  # a graph break: each branch is its own graph
                return y.exp()
            return -y.tanh()

    m, cm, m2, be = compiled_pair(M)
    for sign in (1.0, -1.0):
        x = sign * (R(3, 4).abs() + 5)
        with torch.no_grad():
            close(cm(x), m(x), f"output with sign {sign}")
    branches = [g for g in be.graphs if any("exp" in r.nodes or "tanh" in r.nodes for r in g.regions)]
    assert len(be.graphs) >= 3 and len(branches) == 2


def test_no_grad_inside_forward_runs_its_state_changes_in_eager():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            with torch.no_grad():
                scale = self.fc(x).abs().mean()
            return self.fc(x) * scale

    m, cm, m2, be = compiled_pair(M)
    x = R(3, 4)
    out, ref = cm(x), m(x)
    close(out, ref, "output")
    out.sum().backward()
    ref.sum().backward()
    check_grads(m, m2)
    reasons = [s for g in be.graphs for s in g.split_reasons]
    assert reasons and all(s.reason_type == dynamo.UNSUPPORTED_NODE for s in reasons)
    assert all("changes global state" in s.info for s in reasons)


def test_autocast_block_inside_forward():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(4, 8), nn.Linear(8, 4)

        def forward(self, x):
            with torch.autocast("cpu", torch.bfloat16):
                h = self.fc1(x)
                h = torch.fft.fft(h.float()).real.to(torch.bfloat16)  # eager in the middle of the block
                y = self.fc2(h)
            return y.float().relu()

    m, cm, m2, be = compiled_pair(M)
    m64 = copy.deepcopy(m).double()
    x = R(3, 4)
    out, ref = cm(x), m(x)
    close(out, ref, "output", rtol=1e-2, atol=1e-2)
    assert not torch.is_autocast_enabled("cpu")
    out.sum().backward()
    ref.sum().backward()
    m64.fc2(torch.fft.fft(m64.fc1(x.double())).real).relu().sum().backward()  # the float64 reference
    # bf16 results round at different points (a GEMM epilogue writes the f32 gradient directly where
    # eager rounds it to bf16 first), so each gradient is held to eager's own error against float64
    for (n, p), (_, p2), (_, p64) in zip(m.named_parameters(), m2.named_parameters(), m64.named_parameters()):
        err, eager_err = (p2.grad.double() - p64.grad).abs().max(), (p.grad.double() - p64.grad).abs().max()
        assert err <= 2 * eager_err + 2e-3, f"grad of {n}: error {err:.4g} against float64, eager's {eager_err:.4g}"
        close(p2.grad, p.grad, f"grad of {n}", rtol=2e-2, atol=2e-2)
    (g,) = be.graphs
    # the region after the eager fft runs inside the autocast block: split_module puts the block's
    # enter/exit at its ends, and the region replays them around its thunder-c call
    inside = [r for r in g.regions if r.kind == "thunder-c" and r.state is not None]
    assert inside and all(r.jfn is not None and r.fallback is None for r in inside)
    text = str(thunder_c.last_traces(inside[0].jfn)[0])
    assert "bfloat16" in text or "bf16" in text


def test_buffer_updated_in_place_stays_the_modules_buffer():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)
            self.register_buffer("count", torch.zeros(4))

        def forward(self, x):
            self.count += 1  # Dynamo stores the updated buffer back into the module
            return self.fc(x) * self.count

    m, cm, m2, be = compiled_pair(M)
    for step in range(3):
        x = R(3, 4, seed=step)
        out, ref = cm(x), m(x)
        close(out, ref, f"output {step}")
        out.sum().backward()
        ref.sum().backward()
        close(m2.count, m.count, f"count after {step}")
        assert m2.count.grad_fn is None and not m2.count.requires_grad
    check_grads(m, m2)
    assert len(be.graphs) == 1 and set(kinds(be.graphs[0])) == {"thunder-c"}


def test_outputs_require_grad_as_in_eager():
    def f(x, w):
        return (x @ w).sum(), x * 2, (x > 0)  # only the first depends on w, which requires grad

    x, w = R(3, 4), R(4, 2, seed=1).requires_grad_()
    got = torch.compile(f, backend=ThunderCompiler())(x, w)
    want = f(x, w)
    assert [t.requires_grad for t in got] == [t.requires_grad for t in want] == [True, False, False]
    for i, (g, e) in enumerate(zip(got, want)):
        close(g.detach(), e.detach(), f"output {i}")


def test_eager_op_returning_a_tuple_keeps_its_getitems():
    def f(x):
        v, i = torch.frexp(x * 2)
        return v.exp() + i

    be = ThunderCompiler()
    x = R(3, 5)
    close(torch.compile(f, backend=be)(x), f(x), "output")
    (g,) = be.graphs
    assert kinds(g) == ["thunder-c", "eager", "thunder-c"]
    sort = next(s for s in g.split_reasons if s.target == "torch.frexp")
    getitems = [s for s in g.split_reasons if s.target == "operator.getitem"]
    assert sort.info == "no thunder-c op for torch.frexp" and len(getitems) == 2
    assert all(s.info == f"reads the tuple of eager node {sort.node}" for s in getitems)
    assert g.regions[1].nodes == [sort.node] + [s.node for s in getitems]


def test_region_that_raises_at_run_time_falls_back_to_eager():
    m, cm, m2, be = compiled_pair(MLP)
    x = R(4, 6)
    close(cm(x), m(x), "first call")
    (region,) = be.graphs[0].regions

    def refuse(*args):
        raise NotImplementedError("refused for the test")

    region.jfn = refuse  # what a region whose program the core refuses on another call sees
    close(cm(x), m(x), "call after the fallback")
    assert region.jfn is None
    assert region.fallback == f"{dynamo.EXCEPTION_FIRST_CALL}: NotImplementedError: refused for the test"
    text = be.report()
    assert "thunder_0 [thunder-c -> eager fallback]" in text and "refused for the test" in text


def test_bad_jit_options_raise_when_the_backend_is_made():
    with pytest.raises(ValueError, match="nosuch"):
        ThunderCompiler(executors=["nosuch"])
    with pytest.raises(ValueError, match="unknown cache option"):
        ThunderCompiler(cache="bad")
    with pytest.raises(TypeError):
        ThunderCompiler(bogus=1)


def test_jit_options_reach_the_regions():
    be = ThunderCompiler(executors=["eager"])
    x = R(3, 4)
    close(torch.compile(lambda x: (x * 2).sin(), backend=be)(x), (x * 2).sin(), "output")
    (region,) = be.graphs[0].regions
    assert all(b.executor in (None, "eager") for b in thunder_c.last_traces(region.jfn)[-1].bound_symbols)
    assert "fusion" not in str(thunder_c.last_traces(region.jfn)[-1])


def test_random_ops_follow_torchs_stream():
    def f(x):
        noise = torch.poisson(x.abs()) + 1  # no thunder-c op (a sampler it does not build): eager, torch's stream
        return F.dropout(noise * x.exp(), 0.5), x.sin()  # dropout in thunder-c: its Philox stream

    x = R(64, 8)
    torch.manual_seed(5)
    noise = torch.poisson(x.abs()) + 1  # f's first draw
    torch.manual_seed(5)
    f(x)
    want_next = torch.rand(3)
    be = ThunderCompiler()
    torch.manual_seed(5)
    got, _ = torch.compile(f, backend=be)(x)
    # the trial traces ran inside Dynamo's compile, which restores torch's generator; the dropout
    # advanced it by the words eager's draws, so what torch draws next is what it draws after eager
    close(torch.rand(3), want_next, "the next draw")
    kept = got != 0
    close(got[kept], (noise * x.exp() * 2)[kept], "kept elements, scaled by 1 / (1 - p)")
    assert 0.4 < kept.float().mean() < 0.6
    (g,) = be.graphs
    assert kinds(g) == ["thunder-c", "eager", "thunder-c"]
    assert [r.info for r in g.split_reasons] == ["no thunder-c op for torch.poisson"]


def test_sgd_training_steps_match_eager():
    m, cm, m2, be = compiled_pair(MLP)
    opt, opt2 = torch.optim.SGD(m.parameters(), lr=0.1), torch.optim.SGD(m2.parameters(), lr=0.1)
    tgt = torch.tensor([0, 2, 1, 0])
    for step in range(3):
        x = R(4, 6, seed=step)
        for model, o in ((m, opt), (cm, opt2)):
            o.zero_grad()
            F.nll_loss(model(x).log(), tgt).backward()
            o.step()
        for (n, p), (_, p2) in zip(m.named_parameters(), m2.named_parameters()):
            close(p2.detach(), p.detach(), f"{n} after step {step}")


def tiny_gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=64, n_positions=32, n_embd=16, n_layer=2, n_head=2, bos_token_id=63,
                     eos_token_id=63, pad_token_id=63)
    torch.manual_seed(0)
    return GPT2LMHeadModel(cfg).eval()


def test_hf_gpt2_tiny_forward_and_backward():
    m = tiny_gpt2()
    m2 = copy.deepcopy(m)
    be = ThunderCompiler()
    m2.compile(backend=be)
    ids = torch.randint(0, 63, (2, 6), generator=torch.Generator().manual_seed(1))
    out, ref = m2(ids, labels=ids), m(ids, labels=ids)
    close(out.logits, ref.logits, "logits", rtol=1e-4, atol=1e-4)
    close(out.loss, ref.loss, "loss", rtol=1e-4, atol=1e-4)
    out.loss.backward()
    ref.loss.backward()
    for (n, p), (_, p2) in zip(m.named_parameters(), m2.named_parameters()):
        close(p2.grad, p.grad, f"grad of {n}", rtol=1e-4, atol=1e-4)
    assert be.graphs and all(any(r.kind == "thunder-c" for r in g.regions) for g in be.graphs)


def test_hf_gpt2_tiny_greedy_generate():
    m = tiny_gpt2()
    m2 = copy.deepcopy(m)
    be = ThunderCompiler()
    m2.compile(backend=be)
    ids = torch.randint(0, 63, (1, 5), generator=torch.Generator().manual_seed(2))
    kw = dict(max_new_tokens=4, do_sample=False)
    with torch.no_grad():
        got, want = m2.generate(ids, **kw), m.generate(ids, **kw)
    assert torch.equal(got, want), f"{got} != {want}"
    # the prompt's graph and the decoding steps' graphs all went through the backend
    assert len(be.graphs) >= 2
    nodes = sum(g.n_nodes for g in be.graphs)
    in_thunder = sum(len(r.nodes) for g in be.graphs for r in g.regions if r.kind == "thunder-c")
    assert in_thunder > 0.9 * nodes, be.report()


def test_report_lists_graphs_regions_reasons_and_traces():
    def f(a, b):
        return torch.linalg.pinv(a @ b).exp()

    be = ThunderCompiler()
    a, b = R(2, 3, 3, seed=3), R(2, 3, 3, seed=4)
    a.requires_grad_()
    torch.compile(f, backend=be)(a, b).sum().backward()
    text = dynamo.report(be)
    assert text == be.report()
    lines = text.splitlines()
    assert lines[0] == "Graph 0: 3 nodes, 3 splits (2 thunder-c, 1 eager); 2 nodes in thunder-c, 1 in eager"
    assert lines[1].startswith("  thunder_0 [thunder-c] 1 nodes: ")
    assert lines[2] == "    calls: 1; thunder-c cache 1 hits, 1 misses (the trial trace's included)"
    assert lines[3].startswith("  eager_1 [eager] 1 nodes: ")
    assert "  unsupported nodes (1):" in lines
    det = be.graphs[0].split_reasons[0].node
    assert f"    {det} (torch.linalg.pinv): MISSING_OP_SUPPORT: no thunder-c op for torch.linalg.pinv" in lines
    assert lines[-1] == ("Total: 1 graphs, 3 nodes (2 thunder-c, 1 eager), 2 thunder-c regions, "
                         "1 eager regions, 0 fallbacks")
    full = be.report(traces=True)
    assert full.startswith(text.rsplit("\n", 1)[0])
    # each thunder-c region's execution traces: its forward, and its backward (a requires grad)
    assert full.count("forward trace:") == 2 and full.count("backward trace:") == 2
    assert "def computation(" in full and "def backward_fn(" in full and "prims.matmul" in full


def test_compile_mode_and_options_reach_the_backend():
    # torch.compile passes mode= and options= to the backend: every mode compiles alike, and
    # options are thunder_c.jit's keyword arguments for that torch.compile's graphs
    def f(x):
        return torch.sin(x) * 2

    x = torch.randn(3, 4)
    backend = ThunderCompiler()
    torch.testing.assert_close(torch.compile(f, backend=backend, mode="max-autotune")(x), f(x))
    backend = ThunderCompiler()
    out = torch.compile(f, backend=backend, options={"executors": ["eager"]})(x)
    torch.testing.assert_close(out, f(x))
    assert backend.jit_options == {}
    with pytest.raises(Exception, match="not_an_option"):
        torch.compile(f, backend=ThunderCompiler(), options={"not_an_option": 1})(x)


def test_double_backward_raises_clearly():
    f = lambda x: (x**3).sum()  # noqa: E731
    x = torch.randn(3, requires_grad=True)
    y = torch.compile(f, backend=ThunderCompiler())(x)
    with pytest.raises(RuntimeError, match="double backward is not supported"):
        torch.autograd.grad(y, x, create_graph=True)


def test_batchnorm_module_switches_between_eval_and_train():
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8))
    mod = copy.deepcopy(ref)
    cmod = torch.compile(mod, backend=ThunderCompiler())
    x = torch.randn(5, 4)
    ref.eval(), mod.eval()
    torch.testing.assert_close(cmod(x), ref(x))
    ref.train(), mod.train()
    cmod(x).sum().backward()
    ref(x).sum().backward()
    torch.testing.assert_close(mod[1].running_mean, ref[1].running_mean)
    torch.testing.assert_close(mod[0].weight.grad, ref[0].weight.grad)
    ref.eval(), mod.eval()
    torch.testing.assert_close(cmod(x), ref(x))


def test_functional_pad_runs_in_thunder_c():
    # Dynamo records F.pad as the builtin it wraps (torch._C._nn.pad), which the op table names too
    def f(x, n):
        return F.pad(x, (0, 0, 0, n % 7, 0, 3)) * 2

    be = ThunderCompiler()
    x = R(2, 5, 5, 4)
    close(torch.compile(f, backend=be)(x, 5), f(x, 5), "pad")
    assert be.graphs and all(r.kind == "thunder-c" for g in be.graphs for r in g.regions)
