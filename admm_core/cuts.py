"""Cut points on a network's traced graph: any ``nn.Module`` as T blocks joined by one tensor each.

Block-ADMM needs the network as a chain block_T ∘ … ∘ block_1 in which block_t maps Z_{t−1} to
Z_t and nothing else crosses a boundary. A user's module is traced by ``torch.fx`` (its public,
backward-compatible tracer) into a graph of nodes n_1 … n_N in execution order; every node
remembers the module whose ``forward`` created it (its *module path*, e.g. ``layer2.1`` for the
``add`` of a residual block, ``layer2.1.conv1`` for that convolution).

**A cut point** is a module path (the cut falls after that module's last node) or a graph node
name (after that node). The cut after node n_i is valid when exactly one tensor crosses it:

    crossing(i) = { n_j : j ≤ i, n_j used by some n_k with k > i }  (the input counts as n_0)

and |crossing(i)| = 1. A skip connection that jumps the cut makes it two (the message names the
skip's source module and its consumer, :func:`skip_words`), a size computed before the cut and used after it is a non-tensor crossing.
Each block is then a GraphModule of its own nodes (:func:`_block`, which says why not
``torch.fx.passes.split_module``); each holds the user's own module objects (not copies), so
``.train()`` / ``.eval()``, BatchNorm's statistics and the trained weights are the user's network's.

Refused, each with one :class:`ConfigError` naming what is wrong: a name that is no module path
and no node (with the valid cut points listed), a cut that more than one value crosses, a module
or parameter that holds state and runs in two blocks, a forward that fx cannot trace (data-
dependent control flow; the message names the module, which ``leaf_modules`` can keep whole), a
forward that branches on ``self.training`` (traced twice, the graphs differ), and an output that
is not one tensor. A module whose top-level children run in order (an ``nn.Sequential``) is the
simple case: its children's names are cut points.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import fx, nn

from .errors import ConfigError

__all__ = ["CutPoint", "Graph", "trace", "cut", "cut_points"]


class PathTracer(fx.Tracer):
    """``fx.Tracer`` that records on each node the path of the module whose forward made it
    (``node.meta["module_path"]``, '' for the root's own forward); ``leaves``: module paths kept
    whole (called as one node, not traced into)."""

    def __init__(self, leaves: Sequence[str] = ()):
        super().__init__()
        self.leaves = set(leaves)
        self.stack: list[str] = []
        self.failed_in: str | None = None  # the innermost module whose forward could not be traced

    def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
        return qualname in self.leaves or super().is_leaf_module(m, qualname)

    def call_module(self, m, forward, args, kwargs):
        path = self.path_of_module(m)
        self.stack.append(path)
        try:
            return super().call_module(m, forward, args, kwargs)
        except Exception:
            if self.failed_in is None:  # the innermost: the exception passes the outer ones on its way out
                self.failed_in = path
            raise
        finally:
            self.stack.pop()

    def create_node(self, kind, target, args, kwargs, name=None, type_expr=None):
        node = super().create_node(kind, target, args, kwargs, name, type_expr)
        node.meta["module_path"] = self.stack[-1] if self.stack else ""
        return node


@dataclass
class CutPoint:
    """One place the graph can be cut: after node ``index``; ``names`` the module paths that end
    there (outermost first) and the node's name; ``out_shape`` the crossing tensor's shape per
    sample; ``crossing`` what crosses (one entry when valid); ``why`` the reason it is not."""

    index: int
    node: str
    names: list[str]
    out_shape: list[int] | None
    crossing: list[str] = field(default_factory=list)
    why: str = ""
    skips: list[tuple[int, int]] = field(default_factory=list)  # (producer, last consumer) of each skip

    @property
    def valid(self) -> bool:
        return not self.why

    @property
    def name(self) -> str:
        return self.names[0] if self.names else self.node


@dataclass
class Graph:
    """A traced module: its GraphModule (shapes propagated on a probe), the nodes in order (no
    placeholder, no output) and every node's index."""

    model: nn.Module
    gm: fx.GraphModule
    nodes: list[fx.Node]
    leaves: tuple[str, ...]

    @property
    def what(self) -> str:
        return type(self.model).__name__


class _Shapes(fx.Interpreter):
    """Runs the graph once and records each tensor value's shape on its node (``meta["shape"]``).
    Not ``torch.fx.passes.shape_prop.ShapeProp``: that prints a traceback into the user's console
    when the forward fails, which here is a message of its own."""

    def run_node(self, n):
        result = super().run_node(n)
        if torch.is_tensor(result):
            n.meta["shape"] = tuple(result.shape)
        return result


def _shape(n: fx.Node) -> list[int] | None:
    """The per-sample shape of a node's tensor value (None: not a tensor)."""
    shape = n.meta.get("shape")
    return list(shape[1:]) if shape is not None else None


def _trace_once(model: nn.Module, leaves: Sequence[str]) -> fx.GraphModule:
    what = type(model).__name__
    tracer = PathTracer(leaves)
    try:
        graph = tracer.trace(model)
    except Exception as e:  # noqa: BLE001 - a user's forward can fail to trace in any way
        where = tracer.failed_in or ""
        keep = f"; keep that module whole with leaf_modules=[{where!r}]" if where else ""
        inside = f" inside {where!r} ({type(model.get_submodule(where)).__name__})" if where else ""
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise ConfigError(
            f"model: {what} cannot be traced by torch.fx{inside} ({type(e).__name__}: {first}): a forward whose "
            f"control flow depends on the data cannot be cut into blocks{keep}"
        ) from None
    return fx.GraphModule(tracer.root, graph, what)


def trace(model: nn.Module, probe: torch.Tensor, leaf_modules: Sequence[str] = ()) -> Graph:
    """``model`` traced (module paths on its nodes) and its shapes propagated on ``probe`` (a few
    inputs; eval mode, no gradient). Refuses, naming the module: a non-module, an unknown leaf
    path, an untraceable forward, a forward that differs between train and eval mode, a forward
    that fails on the probe, an output that is not one tensor."""
    if not isinstance(model, nn.Module):
        raise ConfigError(f"model: {type(model).__name__} is not a torch.nn.Module")
    what = type(model).__name__
    if isinstance(leaf_modules, str):
        leaf_modules = [leaf_modules]
    paths = {n for n, _ in model.named_modules()}
    bad = [p for p in leaf_modules if p not in paths or p == ""]
    if bad:
        raise ConfigError(
            f"leaf_modules = {list(leaf_modules)!r}: {', '.join(map(repr, bad))}: no such module in {what}"
        )
    leaves = tuple(leaf_modules)
    was = model.training
    try:
        model.train()
        gm = _trace_once(model, leaves)
        model.eval()
        other = _trace_once(model, leaves)
    finally:
        model.train(was)
    if gm.code != other.code:
        a, b = list(gm.graph.nodes), list(other.graph.nodes)
        diff = next((x for x, y in zip(a, b) if (x.op, x.target, str(x.args)) != (y.op, y.target, str(y.args))), a[-1])
        where = diff.meta.get("module_path", "")
        raise ConfigError(
            f"model: {what}.forward computes something else in train and in eval mode (at node {diff.name!r}"
            f"{f' in {where!r}' if where else ''}: e.g. F.dropout(x, training=self.training)); the traced graph "
            "would keep one of them: use a module for it (nn.Dropout), or keep that module whole with leaf_modules"
        )
    param = next(model.parameters(), None)
    probe = probe.to(param.device) if param is not None else probe
    try:
        model.eval()
        with torch.no_grad():
            out = _Shapes(gm).run(probe)
    except Exception as e:  # noqa: BLE001
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise ConfigError(
            f"model: {what}.forward failed on two training samples of shape {tuple(probe.shape[1:])} "
            f"({type(e).__name__}: {first})"
        ) from None
    finally:
        model.train(was)
    if not torch.is_tensor(out):
        raise ConfigError(f"model: {what}.forward returns {type(out).__name__}, not one tensor (the last block's Z_T)")
    nodes = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
    if sum(n.op == "placeholder" for n in gm.graph.nodes) != 1:
        raise ConfigError(f"model: {what}.forward must take one input tensor")
    return Graph(model, gm, nodes, leaves)


def _module_ends(g: Graph) -> dict[str, int]:
    """Every module path (and each of its parents) -> the index of its last node."""
    last: dict[str, int] = {}
    for i, n in enumerate(g.nodes):
        path = n.target if n.op == "call_module" else n.meta.get("module_path", "")
        parts = path.split(".") if path else []
        for k in range(1, len(parts) + 1):
            last[".".join(parts[:k])] = i
    return last


def _describe(n: fx.Node) -> str:
    if n.op == "placeholder":
        return f"{n.name!r} (the network's input)"
    path = n.target if n.op == "call_module" else n.meta.get("module_path", "")
    return f"{n.name!r} (from {path})" if path else repr(n.name)


def _path(n: fx.Node) -> str:
    return n.target if n.op == "call_module" else n.meta.get("module_path", "")


def _source(n: fx.Node, ends: list[str]) -> str:
    """A crossing value's producer in the user's terms: the innermost module (not the leaf that
    computed it) whose output the value is, e.g. ``layer1.1`` for the ReLU ending that residual
    block; the producing module itself where none encloses it; "the network's input"."""
    if n.op == "placeholder":
        return "the network's input"
    own = _path(n)
    containers = [p for p in ends if p != own or n.op != "call_module"]
    if containers or own:
        return containers[-1] if containers else own
    first = next((a for a in n.args if isinstance(a, fx.Node)), None)  # F.relu(self.conv1(x)): conv1
    return _source(first, []) if first is not None and first.op != "placeholder" else n.name


def skip_words(g: Graph, crossing: list[fx.Node], i: int, index: dict, ends_of: dict) -> str:
    """Why a cut that more than one value crosses is no cut, in the user's words: every value
    besides the newest one (the chain's own tensor) is a skip that jumps the cut, named by its
    producer and its next consumer after the cut: "the skip from layer1.1 (to layer2.0.downsample)
    crosses here". A non-tensor value (a size) is named as such."""
    *extra, _main = crossing  # the cut falls after node i; the newest value is the chain's own
    words = []
    for m in extra:
        src = _source(m, ends_of.get(m, []))
        after = sorted((u for u in m.users if index.get(u, len(g.nodes)) > i), key=lambda u: index.get(u, len(g.nodes)))
        to = ""
        if after:  # the next consumer: its module, else the graph node (a function at top level)
            to = " (to the output)" if after[0].op == "output" else f" (to {_path(after[0]) or after[0].name})"
        kind = "skip" if _shape(m) is not None or m.op == "placeholder" else "non-tensor value"
        words.append(f"the {kind} from {src}{to} crosses here")
    return "; ".join(words)


def cut_points(g: Graph) -> list[CutPoint]:
    """One :class:`CutPoint` per node of ``g`` (the last excluded: nothing follows it), in order."""
    index = {n: i for i, n in enumerate(g.nodes)}
    placeholder = next(n for n in g.gm.graph.nodes if n.op == "placeholder")
    index[placeholder] = -1
    last_use = {}
    for n, i in index.items():
        uses = [index.get(u, len(g.nodes)) for u in n.users]  # the output node counts as after every cut
        last_use[n] = max(uses, default=i)
    ends: dict[int, list[str]] = {}
    for path, i in sorted(_module_ends(g).items(), key=lambda kv: kv[0].count(".")):
        ends.setdefault(i, []).append(path)
    ends_of = {n: ends.get(i, []) for n, i in index.items()}
    live = {placeholder} if last_use[placeholder] >= 0 else set()
    points = []
    for i, n in enumerate(g.nodes[:-1]):
        if n.op != "get_attr" and last_use[n] > i:
            live.add(n)
        live = {m for m in live if last_use[m] > i}
        crossing = sorted(live, key=lambda m: index[m])
        shape = _shape(n)
        why = ""
        if len(crossing) > 1:
            why = skip_words(g, crossing, i, index, ends_of)
        elif not crossing:
            why = "nothing crosses it"
        else:
            if _shape(crossing[0]) is None:
                why = f"the value crossing it, {_describe(crossing[0])}, is not a tensor"
        shape = _shape(crossing[0]) if not why else shape
        skips = [(index[m], last_use[m]) for m in crossing[:-1]] if len(crossing) > 1 else []
        points.append(CutPoint(i, n.name, ends.get(i, []), shape, [c.name for c in crossing], why, skips))
    return points


def _find(points: list[CutPoint], ends: dict[str, int], name: str) -> CutPoint | None:
    """The cut point ``name`` names: a module path first, else a node name."""
    if name in ends and ends[name] < len(points):
        return points[ends[name]]
    return next((p for p in points if p.node == name), None)


def valid_names(points: list[CutPoint]) -> list[str]:
    """The module-path names of the valid cut points, in order (a node name where no module ends)."""
    return [p.names[0] for p in points if p.valid and p.names]


def cut(g: Graph, split_after: Sequence[str]) -> tuple[OrderedDict, list[dict]]:
    """``g`` cut after each of ``split_after``: (the blocks as ``OrderedDict(name -> GraphModule)``,
    one row per block for model.json: its cut name, output shape, the modules wholly inside it).
    Every bad name is said at once, with the valid cut points."""
    if isinstance(split_after, str):
        split_after = [split_after]
    split = list(split_after)
    points = cut_points(g)
    ends = _module_ends(g)
    ok = valid_names(points)
    shown = ", ".join(ok) if len(ok) <= 60 else ", ".join(ok[:60]) + f" … ({len(ok)} in all)"
    bad, chosen = [], []
    for s in split:
        p = _find(points, ends, s) if isinstance(s, str) else None
        if p is None:
            last = ends.get(s) == len(g.nodes) - 1 or (g.nodes and g.nodes[-1].name == s)
            bad.append(
                f"{s!r}: the network's end (a cut must fall before it)" if last else f"{s!r}: no such module or node"
            )
        elif not p.valid:
            bad.append(f"{s!r}: {p.why}")
        else:
            chosen.append(p)
    if len(set(split)) != len(split) or len({p.index for p in chosen}) != len(chosen):
        bad.append("a cut point appears twice")
    if not bad and [p.index for p in chosen] != sorted(p.index for p in chosen):
        bad.append("the cut points must follow the order the forward runs them in")
    if bad:
        raise ConfigError(
            f"split_after = {split!r}: {'; '.join(bad)} (valid cut points of {g.what}: {shown or 'none'})"
        )
    bounds = [p.index for p in chosen]
    where = {n: sum(i > b for b in bounds) for i, n in enumerate(g.nodes)}
    _check_shared(g, where)
    inputs = [next(n for n in g.gm.graph.nodes if n.op == "placeholder")]
    inputs += [next(n for n in g.nodes if n.name == p.crossing[0]) for p in chosen]
    blocks = OrderedDict((f"block{k + 1}", _block(g, where, k, inputs)) for k in range(len(bounds) + 1))
    rows = []
    shapes = [p.out_shape for p in chosen] + [_out_shape(g)]
    for k in range(len(bounds) + 1):
        rows.append(
            {
                "block": k + 1,
                "ends_after": split[k] if k < len(split) else "(the output)",
                "out_shape": shapes[k],
                "modules": _inside(g, where, k),
                "params": sum(p.numel() for p in blocks[f"block{k + 1}"].parameters()),
            }
        )
    return blocks, rows


def _block(g: Graph, where: dict[fx.Node, int], k: int, inputs: list[fx.Node]) -> fx.GraphModule:
    """Block k + 1 as a GraphModule of its own: one placeholder (the tensor crossing the cut before
    it), the nodes assigned to it in order, and as output the tensor crossing the next cut (the
    network's output for the last block). A ``get_attr`` (a parameter or constant the forward reads
    directly, e.g. ViT's class token) is copied into each block that reads it, not passed between
    blocks: ``torch.fx.passes.split_module`` would pass it as a second input and break "one tensor
    crosses". The GraphModule holds the user's module and parameter objects, not copies."""
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {inputs[k]: graph.placeholder("z")}
    last = k == len(inputs) - 1
    for n in g.nodes:
        if where[n] != k and n.op != "get_attr":
            continue
        if n.op == "get_attr" and not any(where.get(u) == k or (last and u.op == "output") for u in n.users):
            continue
        if n in env:
            continue
        env[n] = graph.node_copy(n, lambda a: env[a])
    out = next(n for n in g.gm.graph.nodes if n.op == "output")
    graph.output(fx.map_arg(out.args[0], lambda a: env[a]) if last else env[inputs[k + 1]])
    graph.lint()
    return fx.GraphModule(g.gm, graph, f"{g.what}Block{k + 1}")


def _out_shape(g: Graph) -> list[int] | None:
    out = next(n for n in g.gm.graph.nodes if n.op == "output")
    src = out.args[0]
    return _shape(src) if isinstance(src, fx.Node) else None


def _check_shared(g: Graph, where: dict[fx.Node, int]) -> None:
    """A module or parameter that holds state must live in one block (its Θ belongs to one P_t)."""
    blocks_of: dict[str, set[int]] = {}
    for n in g.nodes:
        if n.op in ("call_module", "get_attr"):
            blocks_of.setdefault(n.target, set()).add(where[n])
    shared = []
    for target, ks in blocks_of.items():
        if len(ks) < 2:
            continue
        obj = g.gm.get_submodule(target) if _is_module(g.gm, target) else None
        stateful = obj is None or any(True for _ in obj.parameters()) or any(True for _ in obj.buffers())
        if stateful:
            shared.append(f"{target!r} runs in blocks {', '.join(str(k + 1) for k in sorted(ks))}")
    if shared:
        raise ConfigError(
            f"model: a module with parameters or buffers must lie in one block: {'; '.join(shared)} "
            "(move the cuts so its uses fall in one block)"
        )


def _is_module(gm: fx.GraphModule, target: str) -> bool:
    try:
        gm.get_submodule(target)
        return True
    except AttributeError:
        return False


def _inside(g: Graph, where: dict[fx.Node, int], k: int) -> list[str]:
    """The outermost module paths all of whose nodes fall in block k, in order of their first node."""
    span: dict[str, list[int]] = {}
    for n in g.nodes:
        path = n.target if n.op == "call_module" else n.meta.get("module_path", "")
        parts = path.split(".") if path else []
        for j in range(1, len(parts) + 1):
            span.setdefault(".".join(parts[:j]), []).append(where[n])
    inside = [p for p, ks in span.items() if set(ks) == {k}]
    top = [p for p in inside if "." not in p or p.rsplit(".", 1)[0] not in inside]
    return top


def _node_args(n: fx.Node) -> list[fx.Node]:
    """The distinct graph values ``n`` reads, in order (constants and get_attr's left out)."""
    out: list[fx.Node] = []
    fx.map_arg((n.args, n.kwargs), lambda a: out.append(a) if a.op != "get_attr" and a not in out else None)
    return out


def skip_arcs(g: Graph, points: list[CutPoint]) -> list[tuple[int, int, list[int]]]:
    """The skips of ``g`` as (producer, join, side branch), node indices (the input is −1).

    A skip is a value m that crosses a cut beside the chain's own tensor (``CutPoint.skips``). Its
    last consumer u starts a *side branch*: u, then u's one user, … while each node reads one value
    and has one user; the branch ends at the first node that reads two or more (the *join*: a
    residual ``add``, a ``cat``). Without a join so reached, the arc ends at u, no side branch.

    Two branches from one fork F to a join J are run one after the other: torchvision's downsample
    block runs conv1 … bn2 (the main path), then downsample.0, downsample.1 (the shortcut), then
    ``add``. F's output jumps the main path to the shortcut, and bn2's output jumps the shortcut to
    ``add``: two values cross, but it is one skip. So a skip to J whose every jumped node lies on
    another skip's side branch to the same J is dropped: the arc F → J, through the shortcut, says
    it all, one arc per residual block.
    """
    index = {n: i for i, n in enumerate(g.nodes)}
    index[next(n for n in g.gm.graph.nodes if n.op == "placeholder")] = -1
    node = {i: n for n, i in index.items()}
    arcs = []
    for a, b in sorted({s for p in points for s in p.skips}):
        u, side = node.get(b), []
        while u is not None and len(_node_args(u)) == 1 and len(u.users) == 1:
            side.append(index[u])
            u = next(iter(u.users))
        if u is None or u.op == "output" or len(_node_args(u)) < 2:
            arcs.append((a, b, []))  # no join on the way: the skip ends at its consumer
        else:
            arcs.append((a, index[u], side))
    kept = []
    for a, j, side in arcs:
        others = {k for a2, j2, s2 in arcs if j2 == j and a2 != a for k in s2}
        if not set(range(a + 1, j)) <= others:  # it jumps a node of the chain, not only another's branch
            kept.append((a, j, side))
    return kept


def table(g: Graph, everything: bool = False) -> list[dict]:
    """The cut points of ``g`` as rows (name, other names, output shape, valid, why): those where a
    module ends, or every node's with ``everything``; what ``admm cuts`` prints.

    ``also_blocks``: the names among ``also`` of modules that hold others (``layer3.1``, the block
    whose output is ``layer3``'s), the ones a user types; the dashboard shows them beside the name.
    ``skip_to`` on a row: the rows where a skip made by that row's layer (or, on none, the input)
    joins the chain again (:func:`skip_arcs`): the arcs the dashboard draws. ``on_skip``: on a layer
    of a skip's side branch (a downsample), [from, to] of that skip's arc, else None."""
    points = cut_points(g)
    shown = [p for p in points if p.names or everything]
    # a value's row: the first shown cut at or after it (a consumer past the last one: the last row)
    row_of = lambda i: (
        next((p.name for p in shown if p.index >= i), shown[-1].name if shown else None) if i >= 0 else "input"
    )
    # a producer's row: the last shown layer at or before it (F.relu(self.conv1(x)) is conv1's)
    made_by = lambda i: next((p.name for p in reversed(shown) if p.index <= i), "input")
    arcs, on_skip = set(), {}
    for a, j, side in skip_arcs(g, points):
        arc = (made_by(a), row_of(j))
        if arc[1] and arc[1] != arc[0]:
            arcs.add(arc)
            on_skip.update({row_of(k): list(arc) for k in side if row_of(k) != arc[1]})
    holds_modules = {name for name, m in g.model.named_modules() if next(m.children(), None) is not None}
    rows = []
    for p in shown:
        rows.append(
            {
                "name": p.name,
                "also": [x for x in p.names[1:]] + ([p.node] if p.names and p.node not in p.names else []),
                "also_blocks": [x for x in p.names[1:] if x in holds_modules],
                "out_shape": p.out_shape,
                "valid": p.valid,
                "why": p.why,
                "skip_to": [b for a, b in sorted(arcs) if a == p.name],
                "on_skip": on_skip.get(p.name),
            }
        )
    return rows
