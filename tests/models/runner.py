"""Running one zoo model (zoo.py) through thunder_c.jit, or a torch.compile backend, against PyTorch
eager — the checks of test_models.py and the rows of report.py.

check(spec, mode) raises unless the mode passes, and returns the largest error it saw:
  forward  eval mode, no grad: every output tensor against eager's;
  train    train mode: the loss of one batch, loss.backward(), every parameter's gradient, one
           torch.optim.SGD step, every parameter after it, and the loss of a second call (which reads
           the updated parameters) — each against an eager copy of the model that did the same;
  bf16     eval mode under torch.autocast("cpu", torch.bfloat16): the outputs against eager float32,
           within a few times eager bfloat16's own error (thunder-c's bf16 rounds differently from
           eager's, so both are compared with the float32 result, not with each other).
Errors are max |x - ref| / max(max |ref|, 1e-6) per tensor: relative to the tensor's scale.

reason(exc) is the one-line, stable description of a failure that failures.json records.
`compile` is thunder_jit by default; ThunderBackend() runs the same checks through the torch.compile
backend.
"""
import re

import torch

import zoo

MODES = ("forward", "train", "bf16")


class Mismatch(AssertionError):
    """A value differs from eager's beyond the spec's tolerance (the message names which one)."""

    def __init__(self, what, err, tol):
        super().__init__(f"{what} differs from eager (max error {err:.3g} > {tol:.3g})")
        self.what, self.err = what, err


def modes(spec):
    return [m for m in MODES if m != "bf16" or spec.llm]


def reason(exc):
    """ExcType: the first line of the message, without the numbers of a Mismatch."""
    if isinstance(exc, Mismatch):
        return f"Mismatch: {exc.what} differs from eager"
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    text = re.sub(r"0x[0-9a-f]+", "0x...", text)
    return f"{type(exc).__name__}: {text}"[:300]


def tensors(o):
    """The tensors of an output structure, in order (ModelOutput, tuple, list, dict)."""
    if isinstance(o, torch.Tensor):
        return [o]
    if isinstance(o, dict):
        return [t for v in o.values() for t in tensors(v)]
    if isinstance(o, (tuple, list)):
        return [t for v in o for t in tensors(v)]
    return []


def max_error(x, ref, floor=0.0):
    """The largest difference relative to the reference's largest magnitude, or to `floor` where that is
    larger (a gradient that is zero in exact arithmetic, such as the bias of a batch norm whose output
    feeds another training-mode batch norm through a linear layer, is rounding noise in both)."""
    x, ref = x.detach().double(), ref.detach().double()
    if x.shape != ref.shape:
        return float("inf")
    if ref.numel() == 0:
        return 0.0
    fin = torch.isfinite(ref)
    if not torch.equal(fin, torch.isfinite(x)) or not torch.equal(torch.where(fin, 0, ref), torch.where(fin, 0, x)):
        return float("inf")  # inf/nan where eager has none, or the other way round
    return ((x - ref).abs()[fin].max() / ref.abs()[fin].max().clamp_min(max(floor, 1e-6))).item() if fin.any() else 0.0


def compare(what, xs, refs, tol, floor=0.0):
    if len(xs) != len(refs):
        raise Mismatch(f"{what}: {len(xs)} tensors, eager {len(refs)}", float("inf"), tol)
    worst = 0.0
    for i, (x, r) in enumerate(zip(xs, refs)):
        if x.dtype != r.dtype:
            raise Mismatch(f"{what}[{i}] dtype {x.dtype} (eager {r.dtype})", float("inf"), tol)
        e = max_error(x, r, floor)
        if not e <= tol:
            raise Mismatch(f"{what}[{i}]" if len(xs) > 1 else what, e, tol)
        worst = max(worst, e)
    return worst


def thunder_jit(model):
    import thunder_c
    return thunder_c.jit(model)


class ThunderBackend:
    """A compile function: torch.compile(model, backend=thunder_c.dynamo.ThunderCompiler()), one
    backend for every model it compiles (`compiler`, whose graphs say what ran where). Dynamo's caches
    are reset first: each zoo model gets graphs of its own, never a recompile limit an earlier model
    of the same class used up (past it Dynamo runs the frame in eager, without the backend)."""

    def __init__(self):
        from thunder_c.dynamo import ThunderCompiler
        self.compiler = ThunderCompiler()

    def __call__(self, model):
        torch._dynamo.reset()
        return torch.compile(model, backend=self.compiler)

    def coverage(self):
        """(nodes thunder-c ran, nodes of every graph Dynamo handed over): a region that fell back to
        eager at run time counts as eager."""
        total = sum(g.n_nodes for g in self.compiler.graphs)
        thunder = sum(len(r.nodes) for g in self.compiler.graphs for r in g.regions
                      if r.kind == "thunder-c" and r.fallback is None)
        return thunder, total


def check_forward(spec, compile=thunder_jit):
    model = spec.build().eval()
    batch = spec.batch()
    with torch.no_grad():
        ref = tensors(spec.forward(model, batch))
        out = tensors(spec.forward(compile(model), batch))
    return compare("output", out, ref, spec.tol)


def check_train(spec, compile=thunder_jit):
    model = spec.build().train()
    ref_model = spec.build().train()  # seeded: the same weights (deepcopy would share minGPT's lambda)
    batch = spec.batch()
    cmodel = compile(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref_model.parameters(), lr=0.1)
    loss, ref_loss = spec.loss(cmodel, batch), spec.loss(ref_model, batch)
    worst = compare("loss", [loss.detach()], [ref_loss.detach()], spec.tol)
    loss.backward()
    ref_loss.backward()
    params, ref_params = dict(model.named_parameters()), dict(ref_model.named_parameters())
    # gradients are compared on the scale of the model's largest one (1e-3 of it as a floor)
    floor = 1e-3 * max((p.grad.detach().abs().max().item() for p in ref_params.values()
                        if p.grad is not None and p.grad.numel()), default=0.0)
    for name, p in ref_params.items():
        g, rg = params[name].grad, p.grad
        if (g is None) != (rg is None):
            raise Mismatch(f"grad of {name} is {'None' if g is None else 'set'} (eager: "
                           f"{'None' if rg is None else 'set'})", float("inf"), spec.train_tol)
        if g is not None:
            worst = max(worst, compare(f"grad of {name}", [g], [rg], spec.train_tol, floor))
    opt.step()
    ref_opt.step()
    pfloor = 1e-3 * max((p.detach().abs().max().item() for p in ref_params.values() if p.numel()), default=0.0)
    for name, p in ref_params.items():
        worst = max(worst, compare(f"{name} after the step", [params[name]], [p], spec.train_tol, pfloor))
    with torch.no_grad():
        worst = max(worst, compare("loss after the step", [spec.loss(cmodel, batch)], [spec.loss(ref_model, batch)],
                                   spec.train_tol))
    return worst


def check_bf16(spec, compile=thunder_jit, slack=4.0, floor=2e-2):
    model = spec.build().eval()
    batch = spec.batch()
    cmodel = compile(model)
    with torch.no_grad():
        ref = tensors(spec.forward(model, batch))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            eager = tensors(spec.forward(model, batch))
            out = tensors(spec.forward(cmodel, batch))
    worst = 0.0
    for i, (o, e, r) in enumerate(zip(out, eager, ref)):
        if o.dtype != e.dtype:
            raise Mismatch(f"bf16 output[{i}] dtype {o.dtype} (eager {e.dtype})", float("inf"), 0)
        tol = max(slack * max_error(e, r), floor)
        err = max_error(o, r)
        if not err <= tol:
            raise Mismatch(f"bf16 output[{i}] against float32", err, tol)
        worst = max(worst, err)
    if len(out) != len(eager):
        raise Mismatch(f"bf16 outputs: {len(out)} tensors, eager {len(eager)}", float("inf"), 0)
    return worst


def check(spec, mode, compile=thunder_jit):
    return {"forward": check_forward, "train": check_train, "bf16": check_bf16}[mode](spec, compile)
