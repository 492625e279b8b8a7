"""Running one zoo model (zoo.py) through thunder_c.jit, or a torch.compile backend, against PyTorch
eager — the checks of test_models.py and the rows of report.py.

check(spec, mode) raises unless the mode passes, and returns the largest error it saw:
  forward  eval mode, no grad: every output tensor against eager's;
  train    train mode: the loss of one batch, loss.backward(), every parameter's gradient, one
           torch.optim.SGD step, every parameter after it, and the loss of a second call (which reads
           the updated parameters) — each against an eager float64 copy of the model that did the same,
           within the tolerance plus a few times eager float32's own error on that value, and, where
           that error exceeds the tolerance, the same step in float64 against eager float64
           (check_train says why);
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


def _double(batch):
    return {k: v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v for k, v in batch.items()}


def train_step(spec, model, batch, compile=None):
    """One train step of `model` (through `compile` when given) on `batch`: the compared values as
    (what, tensor or None) pairs, in the order check_train compares them — the loss, every parameter's
    gradient, every parameter after one SGD step (lr 0.1), and the loss of a second call."""
    cmodel = compile(model) if compile else model
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = spec.loss(cmodel, batch)
    loss.backward()
    out = [("loss", loss.detach())]
    out += [(f"grad of {n}", None if p.grad is None else p.grad.detach().clone()) for n, p in model.named_parameters()]
    opt.step()
    out += [(f"{n} after the step", p.detach().clone()) for n, p in model.named_parameters()]
    with torch.no_grad():
        out.append(("loss after the step", spec.loss(cmodel, batch).detach()))
    return out


def _floors(step):
    """Per compared value, the floor of max_error: 1e-3 of the largest gradient for gradients, of the
    largest parameter for the parameters after the step, none for the losses."""
    def scale(prefix, suffix):
        return 1e-3 * max((t.abs().max().item() for w, t in step if w.startswith(prefix) and w.endswith(suffix)
                           and t is not None and t.numel()), default=0.0)
    g, p = scale("grad of ", ""), scale("", " after the step")
    return [g if w.startswith("grad of ") else 0.0 if w.startswith("loss") else p for w, _ in step]


def _compare_steps(out, ref, floors, tols, suffix=""):
    """The values of two train_step()s, each within its tolerance (the reference may be float64)."""
    worst = 0.0
    for (what, x), (_, r), floor, tol in zip(out, ref, floors, tols):
        if (x is None) != (r is None):
            raise Mismatch(f"{what}{suffix} is {'None' if x is None else 'set'} (eager: "
                           f"{'None' if r is None else 'set'})", float("inf"), tol)
        if x is not None:
            e = max_error(x, r, floor)
            if not e <= tol:
                raise Mismatch(what + suffix, e, tol)
            worst = max(worst, e)
    return worst


TRAIN_SLACK = 4.0  # thunder_c float32 may be this many times as far from float64 as eager float32 is
FLOAT64_TOL = 1e-8  # thunder_c float64 against eager float64: rounding noise only, even where amplified
ILL_CONDITIONED = 0.05  # eager float32 this far from float64 on some value: float32 resolves no value


def check_train(spec, compile=thunder_jit, slack=TRAIN_SLACK):
    """The train step through `compile` in float32 against the same step in eager float64, the exact
    reference: each value within `tol + slack * e` (tol: spec.tol for the first loss, spec.train_tol for
    the rest), where e is eager float32's own error on that value against float64.

    A deep network in training mode amplifies float32 rounding: a batch norm over few values per
    channel (ResNet-50's last stages normalise 8 to 32 values for a batch of 2 at 64x64) subtracts
    nearly equal numbers in its backward, and an SGD step at lr 0.1 makes the second loss a sensitive
    function of every gradient — eager float32 itself is a few per cent off float64 on ResNet-50's first
    gradients. A different, equally valid float32 summation order (oneDNN's, thunder_c's fused kernels)
    lands as far from eager float32 as both are from float64, so eager float32 is no reference there;
    float64 is, and eager float32's distance from it says how close float32 can get.

    Where eager float32 misses spec.train_tol on some value, float32 cannot resolve that value to the
    tolerance, so the step also runs in float64 through `compile` and every value must match eager
    float64 within FLOAT64_TOL: a wrong formula anywhere (one layer's gradient) fails there even when
    float32 noise hides it.

    What no tolerance of this kind covers is a ReLU whose input lies within float32's forward error of
    zero (RegNet-Y-400MF's block4-2 has a batch-norm output 1.6e-5 from zero where float32's forward
    error is 2.7e-4): a different rounding flips its mask, a discontinuity that changes whole
    channels' gradients upstream. Where eager float32 itself is more than ILL_CONDITIONED off float64
    on some value (ResNet-50 at random initialisation and a batch of 2: 62% on a downsample
    convolution's gradient, and flipped ReLUs of its own), the float32 step is chaotic: any two valid
    roundings disagree, so beyond the first loss and finiteness the float32 values are not compared,
    and the float64 stage, which resolves every value, decides."""
    batch = spec.batch()
    out = train_step(spec, spec.build().train(), batch, compile)
    ref32 = train_step(spec, spec.build().train(), batch)  # seeded builds: the same weights
    ref = train_step(spec, spec.build().train().double(), _double(batch))
    floors = _floors(ref)
    for (what, x), (_, r) in zip(out, ref32):
        if x is not None and r is not None and x.dtype != r.dtype:
            raise Mismatch(f"{what} dtype {x.dtype} (eager {r.dtype})", float("inf"), 0)
    own = [0.0 if x is None or r is None else max_error(x, r, f) for (_, x), (_, r), f in zip(ref32, ref, floors)]
    base = [spec.tol] + [spec.train_tol] * (len(ref) - 1)
    tols = [b + slack * e for b, e in zip(base, own)]
    if max(own) > ILL_CONDITIONED:
        # float32 does not determine this step: only the first loss is compared in float32 (and every
        # value must be finite where eager's is); the float64 stage below decides
        tols = tols[:1] + [float("inf")] * (len(tols) - 1)
        for (what, x), (_, r) in zip(out, ref32):
            if x is not None and r is not None and bool(torch.isfinite(r).all()) and not bool(torch.isfinite(x).all()):
                raise Mismatch(f"{what} is not finite", float("inf"), 0)
    worst = _compare_steps(out, ref, floors, tols)
    if max(own) > ILL_CONDITIONED:
        worst = max_error(out[0][1], ref[0][1], floors[0])  # the one float32 value compared
    if max(own) > spec.train_tol:
        out64 = train_step(spec, spec.build().train().double(), _double(batch), compile)
        worst = max(worst, _compare_steps(out64, ref, floors, [FLOAT64_TOL] * len(ref), " (float64)"))
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
