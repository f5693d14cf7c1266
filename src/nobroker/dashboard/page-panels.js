// The page's panels drawn from numbers: the throughput chart (inline SVG, no library) and the workers'
// table. Between page-format.js and page.js in the one script; every text goes in through textContent.
const pagePanels = (function () {
  const SVG = "http://www.w3.org/2000/svg";
  const W = 600, H = 150, PAD_L = 44, PAD_B = 20, PAD_T = 8, PAD_R = 8;
  const MIN_SPAN = 120;  // seconds: the narrowest the chart's time axis gets while its samples are few
  const { el, clockTime, utcTime, duration } = pageFormat;

  function svg(tag, attrs, text) {
    const node = document.createElementNS(SVG, tag);
    for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
    if (text != null) node.textContent = String(text);
    return node;
  }

  // Jobs per minute between each two samples: [{at, succeeded, failed}], gaps (a stopped dashboard) left out.
  function rates(samples, gap) {
    const out = [];
    for (let i = 1; i < samples.length; i++) {
      const a = samples[i - 1], b = samples[i];
      const dt = b.at - a.at;
      if (!(dt > 0) || dt > gap) continue;
      const per = 60 / dt;
      out.push({
        at: b.at, since: a.at,
        succeeded: Math.max(0, b.succeeded - a.succeeded) * per,
        failed: Math.max(0, (b.failed + b.dead) - (a.failed + a.dead)) * per,
      });
    }
    return out;
  }

  // A round number at least ``v`` for the top of the scale: 1, 2, 5, 10, 20, 50...
  function niceTop(v) {
    if (!(v > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 5, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }

  const fmt = (n) => (n === 0 ? "0" : n >= 100 ? Math.round(n).toLocaleString() : n >= 10 ? n.toFixed(1) : n.toFixed(2));

  // Draw throughput (succeeded) and failures (failed and dead) into ``box``: the last ``data.window``
  // seconds, or since the first sample when there is less (at least MIN_SPAN): a dashboard just started
  // shows what it has across the chart, not squeezed at its right edge.
  function drawChart(box, data) {
    const points = rates(data.samples, data.gap);
    const now = data.now;
    const first = data.samples.length ? data.samples[0].at : now;
    const span = Math.min(data.window, Math.max(MIN_SPAN, now - first));
    const from = now - span;
    const top = niceTop(Math.max(0, ...points.map((p) => Math.max(p.succeeded, p.failed))));
    const x = (t) => PAD_L + (W - PAD_L - PAD_R) * Math.min(1, Math.max(0, (t - from) / span));
    const y = (v) => PAD_T + (H - PAD_T - PAD_B) * (1 - v / top);
    const chart = svg("svg", { viewBox: "0 0 " + W + " " + H, class: "chart", role: "img",
      "aria-label": "jobs per minute over the last " + duration(span) });
    for (const v of [0, top / 2, top]) {
      chart.append(svg("line", { x1: PAD_L, x2: W - PAD_R, y1: y(v), y2: y(v), class: "grid" }));
      chart.append(svg("text", { x: PAD_L - 4, y: y(v) + 4, "text-anchor": "end", class: "tick" }, fmt(v)));
    }
    const ticks = [[from, duration(span) + " ago"], [from + span / 2, duration(span / 2) + " ago"], [now, "now"]];
    for (const [t, label] of ticks) {
      const tick = svg("text", { x: x(t), y: H - 4, "text-anchor": t === now ? "end" : t === from ? "start" : "middle", class: "tick" }, label);
      tick.append(svg("title", {}, clockTime(t) + " · " + utcTime(t)));
      chart.append(tick);
    }
    for (const [key, cls] of [["succeeded", "ok"], ["failed", "bad"]]) {
      // Each rate held over the interval it was measured in (steps); a new run after a gap.
      let d = "", last = null;
      for (const p of points) {
        const level = y(p[key]).toFixed(1);
        d += (last !== null && p.since === last ? " L" : " M") + x(p.since).toFixed(1) + " " + level;
        d += " L" + x(p.at).toFixed(1) + " " + level;
        last = p.at;
      }
      if (d) chart.append(svg("path", { d: d.trim(), class: "series " + cls, "data-series": key }));
    }
    const recent = points.filter((p) => p.at > now - 300);
    const mean = (key) => (recent.length ? recent.reduce((s, p) => s + p[key], 0) / recent.length : 0);
    const summary = points.length
      ? "last 5 min: " + fmt(mean("succeeded")) + " succeeded/min, " + fmt(mean("failed")) + " failed/min"
      : "collecting: a rate needs two samples, " + Math.round(data.interval) + " s apart";
    box.replaceChildren(chart, el("div", { class: "hint", id: "chart-summary", text: summary }));
  }

  // The workers' rows: one per announced worker; a worker whose heartbeat is old is shown as gone.
  function workerRows(workers, now) {
    return workers.map((w) => {
      const beat = now - w.heartbeat_at;
      const cells = [
        el("td", { "data-label": "worker" }, [el("span", { class: "cut", text: w.name, title: w.id })]),
        el("td", { "data-label": "host", text: w.host + " · pid " + w.pid }),
        el("td", { "data-label": "kinds" }, [el("span", { class: "cut", text: w.kinds == null ? "all" : w.kinds.join(", "),
          title: w.kinds == null ? "all kinds" : w.kinds.join(", ") })]),
        el("td", { "data-label": "running", text: w.running + " of " + w.concurrency }),
        el("td", { "data-label": "started", text: duration(now - w.started_at) + " ago", title: utcTime(w.started_at) }),
        el("td", { "data-label": "heartbeat", class: w.gone ? "bad" : "", text: (w.gone ? "gone: " : "") + duration(beat) + " ago",
          title: utcTime(w.heartbeat_at) }),
      ];
      return el("tr", { class: "worker" + (w.gone ? " gone" : ""), "data-worker-id": w.id }, cells);
    });
  }

  return { drawChart, rates, workerRows };
})();
