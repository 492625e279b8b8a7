"""thunder_c.dynamo — a torch.compile backend that runs what thunder-c supports and leaves the rest to
eager PyTorch (Lightning Thunder's ThunderFX).

    from thunder_c.dynamo import ThunderCompiler
    backend = ThunderCompiler()
    cmodel = torch.compile(model, backend=backend)
    out = cmodel(x)
    print(backend.report())                 # graphs, regions, split reasons, counts
    print(backend.report(traces=True))      # ... and each region's thunder-c traces

Dynamo hands the backend one torch.fx.GraphModule per captured graph (graph breaks give several). For
each one the backend

1. decides per node whether thunder-c may run it: a call of a torch callable, Tensor method or
   operator that thunder-c's dispatch table maps (the aliases of the core's op table,
   thunder_c._C.ops()), a metadata read (x.size(), x.shape), or plain Python on non-tensors (SymInt
   arithmetic, tuple indexing). A torch callable the table lacks is "no thunder-c op for <target>"; a
   node that changes global state (grad mode, autocast) always runs in eager, since a compiled program
   does not replay it;
2. splits the graph with torch.fx.passes.split_module into maximal runs of supported nodes
   (`thunder_<i>` regions, each compiled with thunder_c.jit) and of unsupported ones (`eager_<i>`,
   run as Dynamo captured them). Inside a torch.no_grad() / torch.autocast block split_module puts
   the block's state changes at each region's ends; a thunder region replays them around its call;
3. trial-traces each thunder region on tensors made from Dynamo's example values (the meta checks of
   the core can still refuse arguments: a dtype, a keyword). A region that raises is tried node by
   node with the eager executor; the nodes that raise alone are marked unsupported with the exception's
   text, and the graph is split again. The trial's jitted region is the one that runs, so the first
   real call with the same input metadata is a cache hit.

A region whose thunder-c call still raises at run time (an input of another shape that the core
refuses, a missing C compiler) falls back to eager for good and records why, so a model that eager
runs always runs. Regions are autograd-aware: thunder_c.jit differentiates a call whose tensor inputs
require grad (Dynamo passes parameters as graph inputs), and loss.backward() runs each region's
backward program.
"""
import contextlib
import dataclasses
import io
import operator

import torch
from torch.fx.passes.split_module import split_module

import thunder_c
from . import _C

__all__ = ["ThunderCompiler", "report", "SplitReason", "GraphInfo", "RegionInfo"]

# Why a node runs in eager (as ThunderFX's SplitReasonType).
MISSING_OP_SUPPORT = "MISSING_OP_SUPPORT"  # no thunder-c op for the node's target
UNSUPPORTED_NODE = "UNSUPPORTED_NODE"  # a node thunder-c never takes (global state, tuple users)
EXCEPTION_TRIAL_TRACE = "EXCEPTION_TRIAL_TRACE"  # the node's trial trace raised
EXCEPTION_FIRST_CALL = "EXCEPTION_FIRST_CALL"  # the region's thunder-c call raised at run time


@dataclasses.dataclass
class SplitReason:
    """Why `node` (its name in the graph Dynamo handed over) runs in eager."""

    node: str
    target: str
    reason_type: str
    info: str

    def __str__(self):
        return f"{self.node} ({self.target}): {self.reason_type}: {self.info}"


@dataclasses.dataclass
class RegionInfo:
    """One submodule of a split graph: `kind` is "thunder-c" or "eager"; `nodes` the names of the
    graph's nodes it holds; `jfn` the thunder_c.jit callable of a thunder-c region (None for eager);
    `fallback` the reason a thunder-c region runs in eager after its call raised (else None); `state`
    the grad-mode / autocast changes split_module put at the region's ends (see _GlobalState), which
    the region replays around its call."""

    name: str
    kind: str
    nodes: list
    module: torch.fx.GraphModule
    jfn: object = None
    fallback: str = None
    calls: int = 0
    state: object = None
    outputs: object = None


@dataclasses.dataclass
class GraphInfo:
    """One graph Dynamo handed to the backend, its split (`split_module`) and why nodes went to eager."""

    index: int
    graph_module: torch.fx.GraphModule
    split_module: torch.fx.GraphModule
    regions: list
    split_reasons: list

    @property
    def n_nodes(self):
        return sum(1 for n in self.graph_module.graph.nodes if n.op not in ("placeholder", "output", "get_attr"))


# ---- which nodes thunder-c can take ----------------------------------------------------------------

# Tensor methods the proxy answers itself (metadata reads) besides the op table's Tensor.* aliases.
_PROXY_METHODS = frozenset(a for a in dir(_C.TensorProxy) if not a.startswith("_")) - {
    "item", "tolist", "numpy", "data_ptr"}
# Reflected operators and the few forward ones the dispatch table adds to the op table's spellings
# (python/thunder_c/csrc/dispatch.c, `protocol`): method name -> the ltorch op it records.
_PROTOCOL = {"__radd__": "ltorch.add", "__rsub__": "ltorch.sub", "__rmul__": "ltorch.mul",
             "__rtruediv__": "ltorch.true_divide", "__rdiv__": "ltorch.true_divide", "__rpow__": "ltorch.pow",
             "__rmatmul__": "ltorch.matmul", "__rfloordiv__": "ltorch.floor_divide", "__rmod__": "ltorch.remainder",
             "__rand__": "ltorch.bitwise_and", "__ror__": "ltorch.bitwise_or", "__rxor__": "ltorch.bitwise_xor",
             "__matmul__": "ltorch.matmul", "__truediv__": "ltorch.true_divide", "__div__": "ltorch.true_divide",
             "__abs__": "ltorch.abs", "__getitem__": "ltorch.getitem", "__and__": "ltorch.bitwise_and",
             "where": "ltorch.where"}
# torch callables the tracer runs eagerly or answers from metadata (dispatch.c: data_constructors,
# state_functions, metadata_functions), so a node calling one may sit in a thunder-c region.
_TRACER_PASSTHROUGH = ("tensor", "as_tensor", "scalar_tensor", "from_numpy", "device", "_assert", "numel",
                       "is_floating_point", "is_complex")
# Nodes that change global state: a compiled program does not replay them, so they run in eager
# (the regions between them then run under the state they set, which thunder_c.jit reads per call).
_GLOBAL_STATE = tuple(f for f in (
    getattr(torch._C, "_set_grad_enabled", None),
    getattr(torch.amp.autocast_mode, "_enter_autocast", None),
    getattr(torch.amp.autocast_mode, "_exit_autocast", None),
    getattr(torch.autograd.grad_mode, "_enter_inference_mode", None),
    getattr(torch.autograd.grad_mode, "_exit_inference_mode", None),
    getattr(torch._C, "_set_deterministic_algorithms", None),
    torch.manual_seed,
) if f is not None)

# Tensor attributes that are views: Dynamo records `x.mT` as a call of the aten op behind the C++
# getter (torch.ops.aten.mT); the backend turns such a node back into getattr(x, "mT"), which the
# proxy answers inside a thunder-c region and the tensor itself in an eager one.
_VIEW_ATTRS = {op: attr for name, attr in (("numpy_T", "T"), ("mT", "mT"), ("matrix_H", "H"), ("mH", "mH"))
               if hasattr(torch.ops.aten, name)
               for op in (getattr(torch.ops.aten, name), getattr(torch.ops.aten, name).default)}
# torch's API-usage logging (nn.Module.__init__ calls it, so a module built inside forward, as
# nn.Identity() in LitGPT's GPT.forward, puts it in the graph): no tensor in or out and no effect on
# any value, so it may sit in a thunder-c region, where it runs as Python while tracing.
_LOGGING = tuple(f for f in (getattr(torch._C, "_log_api_usage_once", None),) if f is not None)

_TABLES = None


def _resolve(spelling):
    """"torch.add", "Tensor.add", "torch.nn.functional.gelu" -> the torch object (None if absent)."""
    for prefix, root in (("torch.Tensor.", torch.Tensor), ("Tensor.", torch.Tensor), ("torch.", torch)):
        if spelling.startswith(prefix):
            obj = root
            for part in spelling[len(prefix):].split("."):
                obj = getattr(obj, part, None)
                if obj is None:
                    return None
            return obj
    return None


def _tables():
    """({torch callable: ltorch qualname}, {Tensor method name: ltorch qualname}) of the op table."""
    global _TABLES
    if _TABLES is None:
        funcs, methods, qualnames = {}, {}, set()
        for qualname, aliases, _schema, _in_place in _C.ops():
            qualnames.add(qualname)
            for sp in filter(None, aliases.split("|")):
                for prefix in ("torch.Tensor.", "Tensor."):
                    if sp.startswith(prefix):
                        methods.setdefault(sp[len(prefix):], qualname)
                        break
                f = _resolve(sp)
                if f is not None:
                    try:
                        funcs.setdefault(f, qualname)
                    except TypeError:  # an unhashable attribute: not a callable
                        pass
        for name, qualname in _PROTOCOL.items():
            if qualname in qualnames:
                methods.setdefault(name, qualname)
        for name in _TRACER_PASSTHROUGH:
            f = getattr(torch, name, None)
            if f is not None:
                funcs.setdefault(f, "(tracer)")
        _TABLES = funcs, methods
    return _TABLES


_MODULE_SPELLINGS = (("torch._C._VariableFunctions.", "torch."), ("torch._C._nn.", "torch.nn.functional."),
                     ("torch._C._linalg.linalg_", "torch.linalg."), ("torch._C._fft.fft_", "torch.fft."),
                     ("torch._C._special.special_", "torch.special."), ("torch._C._linalg.", "torch.linalg."),
                     ("torch._C._fft.", "torch.fft."), ("torch._C._special.", "torch.special."),
                     ("torch._C.TensorBase.", "torch.Tensor."), ("torch._tensor.Tensor.", "torch.Tensor."),
                     ("_operator.", "operator."))


def target_name(node):
    """How users spell the node's target: "torch.fft.fft", "torch.Tensor.softmax", "operator.add"."""
    if node.op == "call_method":
        return f"torch.Tensor.{node.target}"
    if node.op == "call_module":
        return f"module {node.target}"
    t = node.target
    if isinstance(t, str):
        return t
    if isinstance(t, torch._ops.OpOverload | torch._ops.OpOverloadPacket):
        return f"torch.ops.{t}"
    try:
        name = torch.fx.node._get_qualified_name(t)
    except Exception:  # a callable fx cannot name
        name = getattr(t, "__qualname__", None) or repr(t)
    for prefix, spelling in _MODULE_SPELLINGS:
        if name.startswith(prefix):
            return spelling + name[len(prefix):]
    return name


def _is_torch_callable(t):
    if isinstance(t, torch._ops.OpOverload | torch._ops.OpOverloadPacket):
        return True
    mod = getattr(t, "__module__", None) or ""
    if mod.startswith("torch") and not mod.startswith("torch.fx"):
        return True
    return getattr(t, "__objclass__", None) in (torch.Tensor, torch._C.TensorBase)


def _has_tensor(v):
    if isinstance(v, torch.Tensor):
        return True
    if isinstance(v, tuple | list):
        return any(_has_tensor(x) for x in v)
    if isinstance(v, dict):
        return any(_has_tensor(x) for x in v.values())
    return False


def _plain_python(node):
    """True when neither the node's arguments nor its result hold a tensor (torch.sym_sum of SymInts,
    torch.sym_max): inside a thunder-c region it runs as Python on the ints the call passes."""
    if "example_value" not in node.meta or _has_tensor(node.meta["example_value"]):
        return False
    return not any(_has_tensor(a.meta.get("example_value", torch.empty(0))) for a in node.all_input_nodes)


def node_support(node):
    """(True, None) when thunder-c may run `node` (its trial trace decides for certain), else
    (False, SplitReason)."""
    funcs, methods = _tables()
    name = target_name(node)

    def no(kind, info):
        return False, SplitReason(node.name, name, kind, info)

    if node.op == "call_method":
        if node.target in methods or node.target in _PROXY_METHODS:
            return True, None
        return no(MISSING_OP_SUPPORT, f"no thunder-c op for {name}")
    if node.op == "call_module":
        return True, None  # Dynamo inlines modules; one it did not is decided by the trial trace
    t = node.target
    if t in _LOGGING:
        return True, None
    if t in _GLOBAL_STATE:
        return no(UNSUPPORTED_NODE, f"{name} changes global state, which a compiled program does not replay")
    try:
        if t in funcs:
            return True, None
    except TypeError:  # unhashable target
        pass
    if getattr(t, "__module__", None) in ("_operator", "operator") or t in (getattr, len, int, float, bool):
        return True, None  # operators: the proxy implements them, or plain Python on non-tensors
    if _is_torch_callable(t) and not _plain_python(node):
        return no(MISSING_OP_SUPPORT, f"no thunder-c op for {name}")
    return True, None  # another Python callable Dynamo kept in the graph: the trial trace decides


# ---- trial inputs from Dynamo's example values -------------------------------------------------------


def _hint(s):
    """A concrete int for a SymInt (its hint: the value it had when Dynamo traced)."""
    if isinstance(s, torch.SymInt | torch.SymFloat | torch.SymBool):
        h = s.node.hint
        if h is None:
            raise ValueError(f"{s} has no hint (an unbacked symbol)")
        return h
    return s


def _materialize(v):
    """A real value with the metadata of an example value (FakeTensor, SymInt, containers of them):
    floating tensors hold uniform [0, 1) values (from a private generator), integer and bool ones
    zeros (valid indices)."""
    if isinstance(v, torch.Tensor):
        shape = [_hint(s) for s in v.shape]
        stride = [_hint(s) for s in v.stride()]
        with torch.no_grad():
            t = torch.empty_strided(shape, stride, dtype=v.dtype, device=v.device)
            if t.is_floating_point() or t.is_complex():
                # a generator of its own: compiling leaves torch's random stream where eager leaves it
                t.uniform_(generator=torch.Generator(device=t.device).manual_seed(0))
            else:
                t.zero_()
        return t.requires_grad_(v.requires_grad) if v.requires_grad else t
    if isinstance(v, torch.SymInt | torch.SymFloat | torch.SymBool):
        return _hint(v)
    if isinstance(v, tuple | list):
        return type(v)(_materialize(x) for x in v)
    if isinstance(v, dict):
        return {k: _materialize(x) for k, x in v.items()}
    return v


def _example_args(gm):
    """Trial arguments for a GraphModule from its placeholders' example values (None if one lacks it)."""
    out = []
    for n in gm.graph.nodes:
        if n.op != "placeholder":
            continue
        if "example_value" not in n.meta:
            return None
        out.append(_materialize(n.meta["example_value"]))
    return out


def _exception_text(e):
    return f"{type(e).__name__}: {e}".strip()


@contextlib.contextmanager
def _quiet_and_restored():
    """Hides what torch.fx prints to stderr when a GraphModule's call raises (a trial's refusal is
    recorded, not shown) and restores the grad mode afterwards."""
    grad = torch.is_grad_enabled()
    with contextlib.redirect_stderr(io.StringIO()):
        try:
            yield
        finally:
            torch._C._set_grad_enabled(grad)


def _trial(gm, options, state=None):
    """thunder_c.jit(gm, **options) called once on trial arguments (under `state`, a _GlobalState):
    (the jitted callable, None), or (None, the exception's text); (jfn, None) too when gm has no
    example values to try."""
    try:
        jfn = thunder_c.jit(gm, **options)
    except Exception as e:  # noqa: BLE001 - options jit refuses: every region runs in eager
        return None, _exception_text(e)
    try:
        args = _example_args(gm)
    except ValueError:  # an unbacked SymInt: no value to try; the first real call decides
        return jfn, None
    except Exception as e:  # noqa: BLE001 - an example value torch cannot make
        return None, _exception_text(e)
    if args is None:
        return jfn, None
    try:
        with _quiet_and_restored(), _replayed(state):
            jfn(*args)
    except Exception as e:  # noqa: BLE001 - any refusal sends the region to eager
        return None, _exception_text(e)
    return jfn, None


def _view_attrs_as_getattr(gm):
    """Rewrites gm's calls of the view attributes' aten ops (torch.ops.aten.mT(x)) to the attribute
    reads they stand for (getattr(x, "mT"))."""
    changed = False
    for n in gm.graph.nodes:
        if n.op != "call_function" or len(n.args) != 1 or n.kwargs:
            continue
        try:
            attr = _VIEW_ATTRS.get(n.target)
        except TypeError:  # an unhashable target
            continue
        if attr is not None:
            n.target, n.args = getattr, (n.args[0], attr)
            changed = True
    if changed:
        gm.recompile()


def _single_node_module(node):
    """A GraphModule that runs `node` alone on placeholders for its node arguments."""
    g = torch.fx.Graph()
    env = {}
    for a in node.all_input_nodes:
        p = g.placeholder(a.name)
        p.meta = dict(a.meta)
        env[a] = p
    new = g.node_copy(node, lambda a: env[a])
    g.output(new)
    root = node.graph.owning_module
    return torch.fx.GraphModule(root if root is not None else torch.nn.Module(), g)


# ---- the split graph's regions at run time ---------------------------------------------------------

# The global-state nodes split_module copies into a partition: a partition inside a torch.no_grad()
# or torch.autocast block of the graph starts with `_set_grad_enabled(False)` / `_enter_autocast(...)`
# and ends with `_exit_autocast(...)`, so each submodule runs under the state of its nodes.
_GRAD = torch._C._set_grad_enabled
_ENTER = torch.amp.autocast_mode._enter_autocast
_EXIT = torch.amp.autocast_mode._exit_autocast


@dataclasses.dataclass
class _GlobalState:
    """What a thunder-c region's ends change: `head` in order, ("grad", enabled) or ("autocast", the
    _enter_autocast arguments); `exits` the indices into head of the autocasts exited at the end."""

    head: list
    exits: list


def _strip_global_state(gm):
    """(gm without its global-state nodes, their _GlobalState or None): a compiled program does not
    replay them, so the region's wrapper does, around the jitted call."""
    head, exits, index = [], [], {}
    for n in list(gm.graph.nodes):
        if n.op != "call_function":
            continue
        if n.target is _GRAD:
            head.append(("grad", *n.args))
        elif n.target is _ENTER:
            index[n] = len(head)
            head.append(("autocast", *n.args))
        elif n.target is _EXIT:
            exits.append(index[n.args[0]])
    if not head:
        return gm, None
    for n in reversed(list(gm.graph.nodes)):
        if n.op == "call_function" and n.target in (_GRAD, _ENTER, _EXIT):
            gm.graph.erase_node(n)
    gm.recompile()
    return gm, _GlobalState(head, exits)


@contextlib.contextmanager
def _replayed(state):
    """Applies a region's _GlobalState around the body: the grad mode and autocast entries of its
    head, then (also when the body raises) the autocast exits of its end."""
    if state is None:
        yield
        return
    ctxs = {}
    for i, (kind, *args) in enumerate(state.head):
        if kind == "grad":
            _GRAD(*args)
        else:
            ctxs[i] = _ENTER(*args)
    try:
        yield
    finally:
        for i in state.exits:
            _EXIT(ctxs[i])


def _output_plan(gm):
    """How a region's jitted outputs become the ones eager returns, from Dynamo's example values:
    (single, [None | input index per output]) or None when all pass as they are. An output that is an
    input updated in place (`self.count += 1` returns the buffer, which Dynamo stores back into the
    module) is that input itself."""
    phs = [n.meta.get("example_value") for n in gm.graph.nodes if n.op == "placeholder"]
    (out,) = gm.graph.find_nodes(op="output")
    vals = out.args[0]
    single = not isinstance(vals, tuple | list)
    plan = []
    for v in [vals] if single else vals:
        ev = v.meta.get("example_value") if isinstance(v, torch.fx.Node) else None
        plan.append(next((j for j, p in enumerate(phs) if ev is not None and p is ev), None))
    return None if all(p is None for p in plan) else (single, plan)


def _fix_outputs(out, args, plan):
    single, how = plan
    items = [out] if single else list(out)
    for i, j in enumerate(how):
        if j is not None:
            items[i] = args[j]
    return items[0] if single else type(out)(items)


class _Region(torch.nn.Module):
    """A thunder-c region in the split graph: runs its jitted callable; if that raises, records why and
    runs the region's GraphModule in eager from then on."""

    def __init__(self, info):
        super().__init__()
        object.__setattr__(self, "info", info)  # not a submodule: keeps the split graph's module tree plain

    def forward(self, *args):
        info = self.info
        info.calls += 1
        with _replayed(info.state):
            if info.jfn is not None:
                try:
                    out = info.jfn(*args)
                    return out if info.outputs is None else _fix_outputs(out, args, info.outputs)
                except Exception as e:  # noqa: BLE001 - the region falls back to eager for good
                    info.fallback = f"{EXCEPTION_FIRST_CALL}: {_exception_text(e)}"
                    info.jfn = None
            return info.module(*args)


# ---- the backend -----------------------------------------------------------------------------------


class ThunderCompiler:
    """A torch.compile backend (`torch.compile(model, backend=ThunderCompiler())`): splits each graph
    Dynamo captures into thunder-c regions (compiled with thunder_c.jit(..., **jit_options)) and eager
    ones. `graphs` holds a GraphInfo per graph handed over; report() describes them."""

    def __init__(self, **jit_options):
        # bad options are the caller's error, raised here rather than sending every region to eager
        thunder_c.jit(lambda x: x, **jit_options)
        if jit_options.get("executors") is not None:
            thunder_c.jit(lambda x: x + 1, executors=jit_options["executors"])(torch.zeros(1))
        self.jit_options = jit_options
        self.graphs = []

    def __call__(self, gm, example_inputs, mode=None, options=None):
        # torch.compile passes its `mode` (a tuning preset of Inductor's; thunder-c has none, so
        # every mode compiles the same way) and its `options`, which are thunder_c.jit's keyword
        # arguments here and override the backend's own for the graphs of that torch.compile.
        if options:
            opts = {**self.jit_options, **options}
            thunder_c.jit(lambda x: x, **opts)  # options jit refuses raise here, naming the option
            saved, self.jit_options = self.jit_options, opts
            try:
                info = self._split(gm)
            finally:
                self.jit_options = saved
            self.graphs.append(info)
            return info.split_module
        info = self._split(gm)
        self.graphs.append(info)
        return info.split_module

    def _split(self, gm):
        _view_attrs_as_getattr(gm)
        reasons = {}  # node name -> SplitReason
        for n in gm.graph.nodes:
            if n.op in ("placeholder", "output", "get_attr"):
                continue
            ok, why = node_support(n)
            if not ok:
                reasons[n.name] = why
        tried = {}  # (node names, the region's code) -> the jfn of a region whose trial passed
        while True:
            split, regions = self._partition(gm, reasons)
            changed = False
            for r in regions:
                if r.kind != "thunder-c":
                    continue
                key = (frozenset(r.nodes), str(r.module.graph))
                if key not in tried:
                    jfn, err = _trial(r.module, self.jit_options, r.state)
                    if err is None:
                        tried[key] = jfn
                    else:
                        self._blame(gm, r, err, reasons)
                        changed = True
                        break
                r.jfn = tried.get(key)
            if not changed:
                break
        for r in regions:
            if r.kind == "thunder-c":
                split.add_submodule(r.name, _Region(r))
        split.recompile()
        ordered = [reasons[n.name] for n in gm.graph.nodes if n.name in reasons]
        return GraphInfo(len(self.graphs), gm, split, regions, ordered)

    def _blame(self, gm, region, err, reasons):
        """Trial-traces each node of a region that raised alone (eager executor: no kernel compiles)
        and marks those that raise; if none does alone, the whole region goes to eager with `err`."""
        nodes = {n.name: n for n in gm.graph.nodes}
        found = False
        for name in region.nodes:
            n = nodes[name]
            _, e = _trial(_single_node_module(n), {**self.jit_options, "executors": ["eager"]}, region.state)
            if e is not None:
                reasons[name] = SplitReason(name, target_name(n), EXCEPTION_TRIAL_TRACE, e)
                found = True
        if not found:
            for name in region.nodes:
                reasons[name] = SplitReason(name, target_name(nodes[name]), EXCEPTION_TRIAL_TRACE,
                                            f"the region {region.name} of {len(region.nodes)} nodes raised: {err}")

    def _partition(self, gm, reasons):
        """split_module of gm into runs of supported / unsupported nodes: (split GraphModule, regions)."""
        # A node returning a tuple that runs in eager keeps its getitem users with it, so every
        # submodule's outputs are tensors or plain values, never a tuple an eager node built.
        eager = set(reasons)
        for n in gm.graph.nodes:
            if n.name in eager and isinstance(n.meta.get("example_value"), tuple | list):
                for u in n.users:
                    if u.target is operator.getitem and u.name not in eager:
                        eager.add(u.name)
                        reasons.setdefault(u.name, SplitReason(u.name, target_name(u), UNSUPPORTED_NODE,
                                                               f"reads the tuple of eager node {n.name}"))
        # Partition ids, fixed before split_module runs: it calls the callback several times per node.
        assign, kinds, part, prev = {}, {}, 0, None
        for n in gm.graph.nodes:
            if n.op in ("placeholder", "output", "get_attr"):
                continue
            sup = n.name not in eager
            if prev is not None and sup != prev:
                part += 1
            prev = sup
            assign[n.name] = part
            kinds[part] = sup
        split = split_module(gm, None, lambda node: assign[node.name], keep_original_order=True,
                             keep_original_node_name=True)
        # split_module leaves out the output node of an empty graph
        for m in split.children():
            if not m.graph.find_nodes(op="output"):
                m.graph.output(())
                m.recompile()
        regions = []
        for node in list(split.graph.nodes):
            if node.op != "call_module" or not node.target.startswith("submod_"):
                continue
            part = int(node.target[len("submod_"):])
            sub = getattr(split, node.target)
            kind = "thunder-c" if kinds[part] else "eager"
            name = f"{'thunder' if kind == 'thunder-c' else 'eager'}_{part}"
            split.add_submodule(name, sub)
            split.delete_submodule(node.target)
            node.target = name
            node._rename(name)
            members = [n for n, p in assign.items() if p == part]
            region = RegionInfo(name, kind, members, sub)
            if kind == "thunder-c":
                region.module, region.state = _strip_global_state(sub)
                region.outputs = _output_plan(region.module)
            regions.append(region)
        split.recompile()
        return split, regions

    # ---- the report ----

    def report(self, traces=False):
        """The text of report(self, traces)."""
        return report(self, traces)


def _region_traces(r):
    if r.jfn is None:
        return None
    try:
        fw = thunder_c.last_traces(r.jfn)
        bw = thunder_c.last_backward_traces(r.jfn)
    except TypeError:  # never called
        return None
    return fw, bw


def _cache_counts(r):
    if r.jfn is None:
        return ""
    hits, misses = thunder_c.cache_hits(r.jfn), thunder_c.cache_misses(r.jfn)
    return f"; thunder-c cache {hits} hits, {misses} misses (the trial trace's included)"


def report(compiler, traces=False):
    """A readable account of what `compiler` (a ThunderCompiler) did, as ThunderFX's split reasons:
    per graph Dynamo handed over, its regions (thunder-c or eager, with their nodes), the unsupported
    nodes with the reason each runs in eager, and counts; totals at the end. traces=True adds each
    thunder-c region's last traces (the execution trace of its forward and, after a call under
    autograd, of its backward)."""
    lines = []
    tot = {"graphs": 0, "nodes": 0, "thunder": 0, "eager": 0, "tregions": 0, "eregions": 0, "fallbacks": 0}
    for g in compiler.graphs:
        n_t = sum(len(r.nodes) for r in g.regions if r.kind == "thunder-c" and r.fallback is None)
        n_e = g.n_nodes - n_t
        tr = [r for r in g.regions if r.kind == "thunder-c"]
        er = [r for r in g.regions if r.kind == "eager"]
        fb = [r for r in tr if r.fallback is not None]
        tot["graphs"] += 1
        tot["nodes"] += g.n_nodes
        tot["thunder"] += n_t
        tot["eager"] += n_e
        tot["tregions"] += len(tr)
        tot["eregions"] += len(er)
        tot["fallbacks"] += len(fb)
        lines.append(f"Graph {g.index}: {g.n_nodes} nodes, {len(g.regions)} splits "
                     f"({len(tr)} thunder-c, {len(er)} eager); {n_t} nodes in thunder-c, {n_e} in eager")
        for r in g.regions:
            state = r.kind if r.fallback is None else "thunder-c -> eager fallback"
            lines.append(f"  {r.name} [{state}] {len(r.nodes)} nodes: {', '.join(r.nodes)}")
            if r.kind == "thunder-c":
                lines.append(f"    calls: {r.calls}{_cache_counts(r)}")
            if r.fallback is not None:
                lines.append(f"    fallback: {r.fallback}")
        if g.split_reasons:
            lines.append(f"  unsupported nodes ({len(g.split_reasons)}):")
            for s in g.split_reasons:
                lines.append(f"    {s}")
        if traces:
            for r in tr:
                t = _region_traces(r)
                if t is None:
                    lines.append(f"  {r.name}: no traces (not called through thunder-c)")
                    continue
                fw, bw = t
                lines.append(f"  {r.name} forward trace:")
                lines.extend("    " + ln for ln in str(fw[-1]).splitlines())
                if bw:
                    lines.append(f"  {r.name} backward trace:")
                    lines.extend("    " + ln for ln in str(bw[-1]).splitlines())
    lines.append(f"Total: {tot['graphs']} graphs, {tot['nodes']} nodes ({tot['thunder']} thunder-c, "
                 f"{tot['eager']} eager), {tot['tregions']} thunder-c regions, {tot['eregions']} eager regions, "
                 f"{tot['fallbacks']} fallbacks")
    return "\n".join(lines)
