"""chains graph: the picture of a chain from its static description."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from chains.graph import ChainGraph, GraphFormat, render, to_dot, to_mermaid, to_svg
from chains.loader import load_chain

ROOT = Path(__file__).parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*/chain.py"))
ITEST = ROOT / "tests" / "truss_compat" / "vendored" / "tests" / "itest_chain" / "itest_chain.py"
SVG = "{http://www.w3.org/2000/svg}"


def _graph(file: Path) -> ChainGraph:
    return ChainGraph.of(load_chain(file))


@pytest.mark.parametrize("file", [*EXAMPLES, ITEST], ids=lambda p: p.parent.name)
def test_the_svg_draws_every_chainlet_and_call(file: Path) -> None:
    chain = load_chain(file)
    root = ET.fromstring(to_svg(ChainGraph.of(chain)))
    nodes = {g.get("data-name"): g for g in root.iter(f"{SVG}g") if g.get("class") == "node"}
    edges = {
        (g.get("data-caller"), g.get("data-callee")) for g in root.iter(f"{SVG}g") if g.get("class") == "edge"
    }
    assert set(nodes) == {spec.name for spec in chain.chainlets}
    assert edges == {(spec.name, dep.name) for spec in chain.chainlets for dep in spec.dependencies}
    entry = nodes[chain.entrypoint.name].find(f"{SVG}rect")
    assert entry is not None and entry.get("stroke-width") == "2.5"
    # Every box lies inside the picture, and no two boxes overlap.
    width, height = float(root.get("width", 0)), float(root.get("height", 0))
    boxes = []
    for g in nodes.values():
        rect = g.find(f"{SVG}rect")
        assert rect is not None
        x, y, w, h = (float(rect.get(k, 0)) for k in ("x", "y", "width", "height"))
        assert x >= 0 and x + w <= width and y >= 0 and y + h <= height
        boxes.append((x, y, w, h))
    for i, (x1, y1, w1, h1) in enumerate(boxes):
        for x2, y2, w2, h2 in boxes[i + 1 :]:
            assert x1 + w1 <= x2 or x2 + w2 <= x1 or y1 + h1 <= y2 or y2 + h2 <= y1


def test_callers_are_drawn_above_their_callees() -> None:
    graph = _graph(ITEST)
    depth = {node.name: index for index, layer in enumerate(graph.layers()) for node in layer}
    assert all(depth[edge.caller] < depth[edge.callee] for edge in graph.edges)
    assert depth["ItestChain"] == 0 and depth["TextReplicator"] == 2


def test_mermaid_names_every_chainlet_and_call_with_its_settings() -> None:
    text = to_mermaid(_graph(ROOT / "examples" / "streaming" / "chain.py"))
    lines = text.splitlines()
    assert lines[0] == "flowchart TD"
    assert sum("-->" in line for line in lines) == 2
    assert '-->|"generator: retries 3, timeout 30s"| n_Generator' in text
    assert "▶ Entry<br/>" in text and "-#gt; stream of str" in text


@pytest.mark.skipif(
    shutil.which("dot") is None, reason="Graphviz is not installed (apt-get install graphviz)"
)
@pytest.mark.parametrize("file", [*EXAMPLES, ITEST], ids=lambda p: p.parent.name)
def test_graphviz_reads_the_dot_form(file: Path) -> None:
    graph = _graph(file)
    result = subprocess.run(
        ["dot", "-Tjson"], input=to_dot(graph), capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    drawn = json.loads(result.stdout)
    assert {o["name"] for o in drawn["objects"]} == {n.name for n in graph.nodes}
    assert len(drawn.get("edges", [])) == len(graph.edges)


@pytest.mark.parametrize("name", [f.parent.name for f in EXAMPLES])
def test_the_pictures_in_docs_are_current(name: str) -> None:
    drawn = render(_graph(ROOT / "examples" / name / "chain.py"), GraphFormat.SVG)
    assert (ROOT / "docs" / "graphs" / f"{name}.svg").read_text() == drawn, (
        f"regenerate: chains graph examples/{name}/chain.py --out docs/graphs/{name}.svg"
    )


def test_the_command_writes_json_and_files(tmp_path: Path) -> None:
    file = ROOT / "examples" / "hello" / "chain.py"
    run = [sys.executable, "-m", "chains", "graph", str(file)]
    shown = subprocess.run([*run, "--format", "json"], capture_output=True, text=True, check=True, timeout=60)
    data = json.loads(shown.stdout)
    assert [n["name"] for n in data["nodes"]] == ["Hello", "Greeter"]
    assert data["edges"][0]["caller"] == "Hello" and data["edges"][0]["retries"] == 2
    out = tmp_path / "hello.svg"
    written = subprocess.run(
        [*run, "--out", str(out)], capture_output=True, text=True, check=True, timeout=60
    )
    assert "wrote the graph of chain 'hello'" in written.stdout
    ET.fromstring(out.read_text())
    refused = subprocess.run(
        [*run, "--out", str(tmp_path / "missing" / "x.svg")], capture_output=True, text=True
    )
    assert refused.returncode == 1 and "cannot write" in refused.stderr
