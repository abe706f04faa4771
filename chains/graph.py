"""A chain as a picture, from its static description: nothing runs.

``chains graph FILE --format svg|mermaid|dot|json`` draws the chainlets (entrypoint, endpoint,
compute) and the calls between them (retries, timeout, concurrency limit) for READMEs and
reviews::

    graph = ChainGraph.of(load_chain("chain.py"))
    print(to_mermaid(graph))
"""

from __future__ import annotations

import enum
import json
from dataclasses import asdict, dataclass
from xml.sax.saxutils import escape, quoteattr

from chains.model import Chain

__all__ = ["ChainGraph", "Edge", "GraphFormat", "Node", "render", "to_dot", "to_json", "to_mermaid", "to_svg"]


@dataclass(frozen=True)
class Node:
    """One chainlet: what it serves and with what resources."""

    name: str
    entrypoint: bool
    endpoint: str
    concurrency: int
    replicas: int
    gpu: str | None

    @property
    def detail(self) -> str:
        parts = [f"concurrency {self.concurrency}"]
        if self.replicas > 1:
            parts.append(f"{self.replicas} replicas")
        if self.gpu:
            parts.append(f"GPU {self.gpu}")
        return ", ".join(parts)


@dataclass(frozen=True)
class Edge:
    """One dependency: ``caller`` calls ``callee`` through the stub in ``param``."""

    caller: str
    callee: str
    param: str
    retries: int
    timeout_sec: float
    concurrency_limit: int | None

    @property
    def label(self) -> str:
        parts = [f"retries {self.retries}", f"timeout {self.timeout_sec:g}s"]
        if self.concurrency_limit is not None:
            parts.append(f"limit {self.concurrency_limit}")
        return ", ".join(parts)


@dataclass(frozen=True)
class ChainGraph:
    """The chainlets of a chain and the calls between them, entrypoint first."""

    name: str
    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]

    @classmethod
    def of(cls, chain: Chain) -> ChainGraph:
        # Chain lists dependencies before their callers; a picture reads from the entrypoint down.
        specs = list(reversed(chain.chainlets))
        nodes = tuple(
            Node(
                name=spec.name,
                entrypoint=spec is chain.entrypoint,
                endpoint=spec.endpoint.describe(),
                concurrency=spec.remote_config.compute.concurrency,
                replicas=spec.remote_config.compute.replicas,
                gpu=spec.remote_config.compute.gpu,
            )
            for spec in specs
        )
        edges = tuple(
            Edge(
                caller=spec.name,
                callee=dep.name,
                param=dep.param,
                retries=dep.marker.retries,
                timeout_sec=dep.marker.timeout_sec,
                concurrency_limit=dep.marker.concurrency_limit,
            )
            for spec in specs
            for dep in spec.dependencies
        )
        return cls(chain.name, nodes, edges)

    def layers(self) -> list[list[Node]]:
        """Nodes by their longest distance from the entrypoint: callers above their callees."""
        depth = {node.name: 0 for node in self.nodes}
        # The graph is acyclic (the checks refuse cycles): relaxing |nodes| times settles it.
        for _ in self.nodes:
            for edge in self.edges:
                depth[edge.callee] = max(depth[edge.callee], depth[edge.caller] + 1)
        layers: list[list[Node]] = [[] for _ in range(max(depth.values(), default=0) + 1)]
        for node in self.nodes:
            layers[depth[node.name]].append(node)
        return layers


class GraphFormat(enum.Enum):
    """The forms ``chains graph`` writes."""

    SVG = "svg"
    MERMAID = "mermaid"
    DOT = "dot"
    JSON = "json"


def render(graph: ChainGraph, form: GraphFormat) -> str:
    return {
        GraphFormat.SVG: to_svg,
        GraphFormat.MERMAID: to_mermaid,
        GraphFormat.DOT: to_dot,
        GraphFormat.JSON: to_json,
    }[form](graph)


def to_json(graph: ChainGraph) -> str:
    data = {
        "name": graph.name,
        "nodes": [asdict(n) for n in graph.nodes],
        "edges": [asdict(e) for e in graph.edges],
    }
    return json.dumps(data, indent=2) + "\n"


def _mermaid_id(name: str) -> str:
    # Mermaid ids allow letters, digits and underscores; chainlet names may hold '-'.
    return "n_" + "".join(c if c.isalnum() or c == "_" else f"_{ord(c):x}_" for c in name)


def _mermaid_text(text: str) -> str:
    return text.replace('"', "#quot;").replace("<", "#lt;").replace(">", "#gt;")


def to_mermaid(graph: ChainGraph) -> str:
    lines = ["flowchart TD"]
    for node in graph.nodes:
        title = f"{'▶ ' if node.entrypoint else ''}{node.name}"
        text = "<br/>".join(_mermaid_text(part) for part in (title, node.endpoint, node.detail))
        lines.append(f'    {_mermaid_id(node.name)}["{text}"]')
    for edge in graph.edges:
        label = _mermaid_text(f"{edge.param}: {edge.label}")
        lines.append(f'    {_mermaid_id(edge.caller)} -->|"{label}"| {_mermaid_id(edge.callee)}')
    return "\n".join(lines) + "\n"


def _dot_text(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def to_dot(graph: ChainGraph) -> str:
    lines = [
        f"digraph {_dot_text(graph.name)} {{",
        "    rankdir=TB;",
        '    node [shape=box, style="rounded", fontname="Helvetica"];',
        '    edge [fontname="Helvetica", fontsize=10];',
    ]
    for node in graph.nodes:
        label = f"{node.name}\\n{node.endpoint}\\n{node.detail}".replace('"', '\\"')
        style = ', penwidth=2, style="rounded,bold"' if node.entrypoint else ""
        lines.append(f'    {_dot_text(node.name)} [label="{label}"{style}];')
    for edge in graph.edges:
        label = _dot_text(f"{edge.param}: {edge.label}")
        lines.append(f"    {_dot_text(edge.caller)} -> {_dot_text(edge.callee)} [label={label}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


# Layout of the SVG: boxes in layers, sized from their text (a monospace font keeps the
# width of a line predictable without measuring fonts), each box placed under its callers.
_CHAR_W = 7.2
_LABEL_CHAR_W = 6.0
_LINE_H = 16
_PAD = 10
_GAP_X = 40
_GAP_Y = 80
_MARGIN = 20
_WRAP = 64


def _wrap(text: str, width: int = _WRAP) -> list[str]:
    """Lines of at most ``width`` characters, broken after ', ' where possible."""
    lines: list[str] = []
    while len(text) > width:
        comma, space = text.rfind(", ", 0, width), text.rfind(" ", 0, width)
        cut = comma + 2 if comma > 0 else space + 1 if space > 4 else width
        lines.append(text[:cut].rstrip())
        text = "    " + text[cut:]
    return [*lines, text]


def _node_lines(node: Node) -> list[tuple[str, str]]:
    return [
        (node.name, "bold"),
        *((line, "normal") for line in _wrap(node.endpoint)),
        (node.detail, "normal"),
    ]


def to_svg(graph: ChainGraph) -> str:
    """A standalone SVG: no scripts, no external fonts or styles."""
    layers = graph.layers()
    size: dict[str, tuple[float, float]] = {}
    for node in graph.nodes:
        lines = _node_lines(node)
        size[node.name] = (
            max(len(t) for t, _ in lines) * _CHAR_W + 2 * _PAD,
            len(lines) * _LINE_H + 2 * _PAD,
        )
    callers: dict[str, list[str]] = {}
    reach: dict[str, float] = {}
    for edge in graph.edges:
        callers.setdefault(edge.callee, []).append(edge.caller)
        label_w = 6 + len(f"{edge.param}: {edge.label}") * _LABEL_CHAR_W
        reach[edge.callee] = max(reach.get(edge.callee, 0.0), label_w)
    center: dict[str, float] = {}
    top: dict[str, float] = {}
    y = float(_MARGIN)
    for layer in layers:
        # Each box as close as it may get to the middle of its callers, left to right.
        def wanted(node: Node) -> float:
            above = [center[c] for c in callers.get(node.name, []) if c in center]
            return sum(above) / len(above) if above else 0.0

        right = float("-inf")
        for node in sorted(layer, key=wanted):
            w, _ = size[node.name]
            left = max(wanted(node) - w / 2, right + _GAP_X)
            center[node.name] = left + w / 2
            # The labels of the arrows into a box start at its middle and may reach past it.
            right = left + max(w, w / 2 + reach.get(node.name, 0.0))
        height = max(size[n.name][1] for n in layer)
        for node in layer:
            top[node.name] = y + (height - size[node.name][1]) / 2
        y += height + _GAP_Y
    shift = _MARGIN - min(center[n.name] - size[n.name][0] / 2 for n in graph.nodes)
    box = {
        n.name: (center[n.name] - size[n.name][0] / 2 + shift, top[n.name], *size[n.name])
        for n in graph.nodes
    }
    total_w = max(x + max(w, w / 2 + reach.get(name, 0.0)) for name, (x, _, w, _) in box.items()) + _MARGIN
    total_h = y - _GAP_Y + _MARGIN
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{total_w:.0f}" height="{total_h:.0f}" '
        f'viewBox="0 0 {total_w:.0f} {total_h:.0f}" font-family="monospace" font-size="12">',
        f"<title>{escape(graph.name)}</title>",
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="8" markerHeight="8" '
        'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#555"/></marker></defs>',
    ]
    into: dict[str, int] = {}
    for edge in graph.edges:
        x1, y1, w1, h1 = box[edge.caller]
        x2, y2, w2, _ = box[edge.callee]
        sx, sy, ex, ey = x1 + w1 / 2, y1 + h1, x2 + w2 / 2, y2
        mid = (sy + ey) / 2
        # Labelled just above the box it points at: callees stand apart, so labels do too.
        stacked = into[edge.callee] = into.get(edge.callee, -1) + 1
        label = escape(f"{edge.param}: {edge.label}")
        out.append(
            f'<g class="edge" data-caller={quoteattr(edge.caller)} data-callee={quoteattr(edge.callee)}>'
            f'<path d="M {sx:.1f} {sy:.1f} C {sx:.1f} {mid:.1f}, {ex:.1f} {mid:.1f}, {ex:.1f} {ey:.1f}" '
            'fill="none" stroke="#555" marker-end="url(#arrow)"/>'
            f'<text x="{ex + 6:.1f}" y="{ey - 8 - 12 * stacked:.1f}" fill="#333" font-size="10">'
            f"{label}</text></g>"
        )
    for node in graph.nodes:
        x, y0, w, h = box[node.name]
        stroke = ' stroke-width="2.5" stroke="#1f5fbf"' if node.entrypoint else ' stroke="#444"'
        out.append(
            f'<g class="node" data-name={quoteattr(node.name)}>'
            f'<rect x="{x:.1f}" y="{y0:.1f}" width="{w:.1f}" height="{h:.1f}" rx="6" fill="#f6f8fb"{stroke}/>'
        )
        for index, (text, weight) in enumerate(_node_lines(node)):
            ty = y0 + _PAD + (index + 1) * _LINE_H - 4
            attributes = f'x="{x + _PAD:.1f}" y="{ty:.1f}" font-weight="{weight}" xml:space="preserve"'
            out.append(f"<text {attributes}>{escape(text)}</text>")
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out) + "\n"
