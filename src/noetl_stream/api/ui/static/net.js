// Drawing a playbook's net (laid out by the server: GET /api/executions/{id}/net) as SVG, and
// marking its steps as the execution moves.
"use strict";

const NET = (() => {
  const SVG = "http://www.w3.org/2000/svg";
  const MIN_SCALE = 0.6;
  const GUARD_LIMIT = 26; // characters of a guard drawn on its arc; the whole guard is its tooltip

  function svg(tag, attrs, ...children) {
    const node = document.createElementNS(SVG, tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value !== null && value !== undefined) node.setAttribute(key, String(value));
    }
    for (const child of children) {
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  // A forward arc bends smoothly through its points, leaving and entering horizontally.
  function forwardPath(points) {
    let d = `M ${points[0][0]} ${points[0][1]}`;
    for (let i = 1; i < points.length; i++) {
      const [x0, y0] = points[i - 1];
      const [x1, y1] = points[i];
      const dx = (x1 - x0) / 2;
      d += ` C ${x0 + dx} ${y0} ${x1 - dx} ${y1} ${x1} ${y1}`;
    }
    return d;
  }

  // A back arc leaves the bottom of its step and swings under the net to an earlier step.
  function backPath(points, depth) {
    const [sx, sy] = points[0];
    const [tx, ty] = points[points.length - 1];
    return `M ${sx} ${sy} C ${sx} ${sy + depth} ${tx} ${ty + depth} ${tx} ${ty}`;
  }

  function selfPath(node) {
    const x = node.x + node.w - 24;
    const y = node.y;
    return `M ${x} ${y} C ${x} ${y - 38} ${x + 46} ${y - 38} ${x + 24} ${y}`;
  }

  function labelPoint(edge, node, depth) {
    const p = edge.points;
    if (edge.source === edge.target) return [node.x + node.w, node.y - 30];
    if (edge.back) {
      return [(p[0][0] + p[p.length - 1][0]) / 2, Math.max(p[0][1], p[p.length - 1][1]) + depth * 0.75];
    }
    const i = Math.max(0, Math.floor((p.length - 2) / 2));
    return [(p[i][0] + p[i + 1][0]) / 2, (p[i][1] + p[i + 1][1]) / 2 - 8];
  }

  function subtitle(node) {
    if (node.implicit) return "end of branch";
    const parts = [];
    if (node.loop) parts.push(`loop ${node.loop}`);
    if (node.listener) parts.push("listener");
    if (node.kinds.length) parts.push(node.kinds.join(" → "));
    else if (!node.loop && !node.listener) parts.push("no tool");
    return parts.join(" · ");
  }

  // Draw `net` into the <svg> element; `onSelect(name)` is called when a step is clicked.
  function draw(root, net, onSelect) {
    root.textContent = "";
    const byName = new Map(net.nodes.map((n) => [n.name, n]));
    const backs = net.edges.filter((e) => e.back && e.source !== e.target).length;
    const depth = 56;
    const height = net.height + (backs ? depth + 24 : 0) + 30;
    root.setAttribute("viewBox", `0 -30 ${net.width} ${height}`);
    // Shrink a wide net to fit its box while its text stays readable; past that, it scrolls.
    const room = root.parentElement ? root.parentElement.clientWidth : 0;
    const scale = room > 0 && net.width > room ? Math.max(room / net.width, MIN_SCALE) : 1;
    root.setAttribute("width", Math.floor(net.width * scale));
    root.setAttribute("height", Math.floor(height * scale));
    root.append(svg("defs", {},
      svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7,
        markerHeight: 7, orient: "auto-start-reverse" }, svg("path", { d: "M 0 0 L 10 5 L 0 10 z" }))));
    const edges = svg("g", { class: "edges" });
    const labels = svg("g", { class: "labels" });
    for (const edge of net.edges) {
      const source = byName.get(edge.source);
      const d = edge.source === edge.target ? selfPath(source)
        : edge.back ? backPath(edge.points, depth) : forwardPath(edge.points);
      const cls = ["edge", edge.back ? "back" : "", edge.mode === "inclusive" ? "inclusive" : ""];
      const path = svg("path", { d, class: cls.join(" ").trim(), "marker-end": "url(#arrow)",
        "data-source": edge.source, "data-target": edge.target });
      path.append(svg("title", {}, `${edge.source} → ${edge.target}` +
        (edge.when ? `\nwhen ${edge.when}` : "\non success") +
        (edge.route ? `\nroute ${edge.route}` : "") + (edge.delay ? `\ndelay ${edge.delay}s` : "")));
      edges.append(path);
      const text = [edge.when ? NS.short(edge.when.replace(/^\{\{\s*|\s*\}\}$/g, ""), GUARD_LIMIT) : "",
        edge.route ? `route ${edge.route}` : "", edge.delay ? `after ${edge.delay}s` : ""]
        .filter(Boolean).join(" · ");
      if (text) {
        const [lx, ly] = labelPoint(edge, source, depth);
        const group = svg("g", { class: "guard" });
        const label = svg("text", { x: lx, y: ly, "text-anchor": "middle" }, text);
        group.append(svg("title", {}, edge.when || text), label);
        labels.append(group);
        requestAnimationFrame(() => {
          const box = label.getBBox();
          group.insertBefore(svg("rect", { x: box.x - 3, y: box.y - 1, width: box.width + 6,
            height: box.height + 2, rx: 3 }), label);
        });
      }
    }
    const nodes = svg("g", { class: "nodes" });
    const marks = new Map();
    for (const node of net.nodes) {
      const group = svg("g", { class: "node pending" + (node.join ? " join" : "") +
        (node.implicit ? " implicit" : "") + (node.start ? " start" : ""),
        "data-step": node.name, tabindex: node.implicit ? null : 0,
        transform: `translate(${node.x} ${node.y})` });
      group.append(svg("rect", { width: node.w, height: node.h, rx: 8 }));
      if (node.join) {
        group.append(svg("rect", { class: "join-bar", x: -5, y: 6, width: 5, height: node.h - 12 }));
      }
      group.append(svg("text", { class: "name", x: 12, y: 22 }, NS.short(node.name, 20)));
      group.append(svg("text", { class: "kind", x: 12, y: 40 }, NS.short(subtitle(node), 26)));
      const badge = svg("text", { class: "badge", x: node.w - 10, y: 22, "text-anchor": "end" });
      const token = svg("circle", { class: "token", cx: node.w - 12, cy: node.h - 12, r: 5 });
      group.append(badge, token,
        svg("title", {}, node.name + (node.desc ? `\n${node.desc}` : "") + (node.join ? "\njoin: waits for its branches" : "")));
      if (!node.implicit) {
        group.addEventListener("click", () => onSelect(node.name));
        group.addEventListener("keydown", (e) => { if (e.key === "Enter") onSelect(node.name); });
      }
      nodes.append(group);
      marks.set(node.name, { group, badge });
    }
    root.append(edges, nodes, labels);

    // status: step -> completed | failed | running | skipped | cancelled | pending;
    // badges: step -> short text (loop progress, join arrivals); tokens: steps holding one.
    function mark(status, badges, tokens, selected) {
      for (const [name, { group, badge }] of marks) {
        const node = byName.get(name);
        const cls = ["node", status.get(name) || "pending"];
        if (node.join) cls.push("join");
        if (node.implicit) cls.push("implicit");
        if (node.start) cls.push("start");
        if (tokens.has(name)) cls.push("has-token");
        if (selected === name) cls.push("selected");
        group.setAttribute("class", cls.join(" "));
        badge.textContent = badges.get(name) || "";
      }
    }
    return { mark };
  }

  return { draw };
})();
