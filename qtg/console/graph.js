// The movement DAG as SVG: a layered layout by dependency depth, drawn by hand.
//
// layout() is pure (nodes and edges in, coordinates out) so it can be reasoned
// about on its own; draw() turns a layout into SVG elements. Layers run left to
// right (depth = longest path from a root; a long narrow plan runs top to
// bottom instead); within a layer, nodes are ordered
// by the mean position of their neighbours (a few barycentre sweeps), which
// keeps the crossings of typical fan-out/fan-in plans low. Big plans scroll:
// nodes never shrink below a readable size.

import { s } from "./dom.js";

export const NODE_W = 176;
export const NODE_H = 48;
const GAP_X = 48;
const GAP_Y = 18;
const GAP_V = 30; // between layers, top to bottom
// more layers than this (and a plan much deeper than wide) are drawn top to bottom
const MAX_ACROSS = 7;
const PAD = 16;

/**
 * nodes: [{key}], edges: [[from, to]] → {width, height, boxes: Map key → {x, y, layer},
 * edges: [[from, to]]} (edges naming unknown nodes are dropped).
 */
export function layout(nodes, edges) {
  const keys = nodes.map((n) => n.key);
  const known = new Set(keys);
  const kept = edges.filter(([a, b]) => known.has(a) && known.has(b) && a !== b);
  const preds = new Map(keys.map((k) => [k, []]));
  const succs = new Map(keys.map((k) => [k, []]));
  for (const [a, b] of kept) {
    preds.get(b).push(a);
    succs.get(a).push(b);
  }
  // Longest-path depth; a cycle (never valid in a plan) is cut where it is met.
  const depth = new Map();
  const visiting = new Set();
  const depthOf = (k) => {
    if (depth.has(k)) return depth.get(k);
    if (visiting.has(k)) return 0;
    visiting.add(k);
    const d = preds.get(k).reduce((m, p) => Math.max(m, depthOf(p) + 1), 0);
    visiting.delete(k);
    depth.set(k, d);
    return d;
  };
  keys.forEach(depthOf);
  const layers = [];
  for (const k of keys) {
    const d = depth.get(k);
    (layers[d] ||= []).push(k);
  }
  for (let i = 0; i < layers.length; i++) layers[i] ||= [];
  // Barycentre sweeps: forward by predecessors, backward by successors.
  const order = new Map();
  const index = () => layers.forEach((layer) => layer.forEach((k, i) => order.set(k, i)));
  index();
  const sweep = (layer, neighbours) => {
    const score = new Map(
      layer.map((k) => {
        const ns = neighbours.get(k);
        const mean = ns.length ? ns.reduce((t, n) => t + order.get(n), 0) / ns.length : order.get(k);
        return [k, mean];
      }),
    );
    layer.sort((a, b) => score.get(a) - score.get(b) || order.get(a) - order.get(b));
    layer.forEach((k, i) => order.set(k, i));
  };
  for (let round = 0; round < 4; round++) {
    for (let i = 1; i < layers.length; i++) sweep(layers[i], preds);
    for (let i = layers.length - 2; i >= 0; i--) sweep(layers[i], succs);
  }
  const tallest = Math.max(1, ...layers.map((l) => l.length));
  // A deep, narrow plan (a long chain) runs top to bottom instead, so it
  // scrolls the way a page does rather than thousands of pixels sideways.
  const vertical = layers.length > MAX_ACROSS && layers.length > 2 * tallest;
  const boxes = new Map();
  let width;
  let height;
  if (vertical) {
    const rowWidth = (n) => n * NODE_W + (n - 1) * GAP_Y * 2;
    width = PAD * 2 + rowWidth(tallest);
    height = PAD * 2 + layers.length * NODE_H + Math.max(0, layers.length - 1) * GAP_V;
    layers.forEach((layer, li) => {
      const left = PAD + (rowWidth(tallest) - rowWidth(layer.length)) / 2;
      layer.forEach((k, i) => {
        boxes.set(k, { x: left + i * (NODE_W + GAP_Y * 2), y: PAD + li * (NODE_H + GAP_V), layer: li });
      });
    });
  } else {
    const columnHeight = (n) => n * NODE_H + (n - 1) * GAP_Y;
    height = PAD * 2 + columnHeight(tallest);
    width = PAD * 2 + layers.length * NODE_W + Math.max(0, layers.length - 1) * GAP_X;
    layers.forEach((layer, li) => {
      const top = PAD + (columnHeight(tallest) - columnHeight(layer.length)) / 2;
      layer.forEach((k, i) => {
        boxes.set(k, { x: PAD + li * (NODE_W + GAP_X), y: top + i * (NODE_H + GAP_Y), layer: li });
      });
    });
  }
  return { width, height, boxes, edges: kept, layers, vertical };
}

function clip(text, max) {
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

/**
 * The SVG for a movement: nodes coloured by state (CSS classes st-<STATE>),
 * frontier nodes outlined, `onSelect(key)` on click or Enter. A template's
 * plan is drawn with node_state "PLAN" (no state yet: kind and action type shown).
 */
export function draw(movement, { selected, onSelect } = {}) {
  const geo = layout(movement.nodes.map((n) => ({ key: n.node_key })), movement.edges || []);
  const frontier = new Set(movement.current_frontier || []);
  const svg = s("svg.dag", {
    width: geo.width,
    height: geo.height,
    viewBox: `0 0 ${geo.width} ${geo.height}`,
    role: "group",
    "aria-label": `graph of ${movement.nodes.length} nodes`,
  });
  svg.append(
    s("defs", s("marker", {
      id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5,
      markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse",
    }, s("path.arrowhead", { d: "M 0 0 L 10 5 L 0 10 z" }))),
  );
  const edgeLayer = s("g.edges");
  for (const [a, b] of geo.edges) {
    const p = geo.boxes.get(a);
    const q = geo.boxes.get(b);
    let d;
    if (geo.vertical) {
      const x1 = p.x + NODE_W / 2, y1 = p.y + NODE_H, x2 = q.x + NODE_W / 2, y2 = q.y;
      const mid = (y1 + y2) / 2;
      d = `M ${x1} ${y1} C ${x1} ${mid}, ${x2} ${mid}, ${x2} ${y2 - 1}`;
    } else {
      const x1 = p.x + NODE_W, y1 = p.y + NODE_H / 2, x2 = q.x, y2 = q.y + NODE_H / 2;
      const mid = (x1 + x2) / 2;
      d = `M ${x1} ${y1} C ${mid} ${y1}, ${mid} ${y2}, ${x2 - 1} ${y2}`;
    }
    edgeLayer.append(s("path.edge", {
      d,
      "marker-end": "url(#arrow)",
      dataset: { from: a, to: b },
    }));
  }
  svg.append(edgeLayer);
  const nodeLayer = s("g.nodes");
  for (const node of movement.nodes) {
    const box = geo.boxes.get(node.node_key);
    const classes = [`st-${node.node_state}`];
    if (frontier.has(node.node_key)) classes.push("frontier");
    if (selected === node.node_key) classes.push("selected");
    const g = s("g.node", {
      class: classes.join(" "),
      transform: `translate(${box.x} ${box.y})`,
      tabindex: 0,
      role: "button",
      "aria-label": `${node.node_key}: ${node.node_state}`,
      dataset: { key: node.node_key, state: node.node_state, kind: node.node_kind },
      onclick: () => onSelect && onSelect(node.node_key),
      onkeydown: (e) => {
        if ((e.key === "Enter" || e.key === " ") && onSelect) {
          e.preventDefault();
          onSelect(node.node_key);
        }
      },
    });
    g.append(
      s("title", `${node.node_key} (${node.node_kind} ${node.action_type}): ${node.node_state}`),
      s("rect.box", { width: NODE_W, height: NODE_H, rx: 7, ry: 7 }),
      s("text.key", { x: 10, y: 19 }, clip(node.node_key, 20)),
      s("text.sub", { x: 10, y: 37 }, clip(node.node_state === "PLAN"
        ? `${node.node_kind} · ${node.action_type}`
        : `${node.node_state} · ${node.node_kind}`, 26)),
    );
    if (node.attempt_no > 1) {
      g.append(s("text.attempts", { x: NODE_W - 8, y: 19, "text-anchor": "end" }, `×${node.attempt_no}`));
    }
    if (frontier.has(node.node_key)) {
      g.append(s("circle.frontier-dot", { cx: NODE_W - 10, cy: NODE_H - 11, r: 4 }));
    }
    nodeLayer.append(g);
  }
  svg.append(nodeLayer);
  return svg;
}

/** The legend: one swatch per node state, in the graph's own colours. */
export const NODE_STATES = [
  "BLOCKED", "READY", "SUBMITTING", "SUBMITTED", "OBSERVING",
  "COMPLETED", "SKIPPED", "FAILED", "UNKNOWN",
];

export function legend() {
  const svg = s("svg.legend", { width: NODE_STATES.length * 104 + 110, height: 22 });
  NODE_STATES.forEach((state, i) => {
    const g = s("g.node", { class: `st-${state}`, transform: `translate(${i * 104} 2)` });
    g.append(s("rect.box", { width: 16, height: 16, rx: 3 }), s("text.legend-text", { x: 22, y: 13 }, state));
    svg.append(g);
  });
  const f = s("g.node.frontier", { transform: `translate(${NODE_STATES.length * 104} 2)` });
  f.append(s("rect.box", { width: 16, height: 16, rx: 3 }), s("text.legend-text", { x: 22, y: 13 }, "frontier"));
  svg.append(f);
  return svg;
}
