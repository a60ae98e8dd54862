// A small time-series line chart on <canvas>: the dashboard's only chart kind.
// The API gives current rates; history is what this page has sampled since
// it was opened, kept per key so returning to a page keeps its curve.

import { h } from "./dom.js";

const COLORS = ["#2b6cb0", "#d69e2e", "#38a169", "#e53e3e", "#805ad5", "#dd6b20"];
const HISTORY = new Map();
const TICKS = [10, 15, 30, 60, 120, 300, 600];

// A round top for the y axis at or above v (1, 2, 5 x 10^n) and how many grid
// steps divide it into round numbers.
function niceScale(v) {
  if (v <= 0) return [1, 4];
  const p = 10 ** Math.floor(Math.log10(v));
  for (const [m, steps] of [[1, 4], [2, 4], [5, 5], [10, 4]]) if (v <= m * p) return [m * p, steps];
  return [10 * p, 4];
}

function label(v) {
  if (v >= 1e6) return `${(v / 1e6).toFixed(1)}M`;
  if (v >= 1e4) return `${(v / 1e3).toFixed(0)}k`;
  return String(+v.toFixed(2));
}

export class LineChart {
  // key: where the history is kept; series: [label, ...]; span: seconds shown
  constructor(key, series, { span = 300, unit = "" } = {}) {
    this.series = series;
    this.span = span;
    this.unit = unit;
    if (!HISTORY.has(key)) HISTORY.set(key, []);
    this.points = HISTORY.get(key);
    this.canvas = h("canvas", { class: "chart", height: 160 });
    this.el = h("figure", { class: "chart" }, this.canvas,
      h("figcaption", {}, series.map((s, i) =>
        h("span", { class: "legend" }, h("i", { class: `swatch c${i}` }), s))));
  }

  push(values, t = Date.now()) {
    this.points.push({ t, values });
    while (this.points.length && this.points[0].t < t - this.span * 1000) this.points.shift();
    this.el.dataset.points = this.points.length;
    this.draw(t);
  }

  draw(now = Date.now()) {
    const c = this.canvas;
    const width = c.clientWidth || 600;
    const height = c.clientHeight || 160;
    const dpr = window.devicePixelRatio || 1;
    if (c.width !== Math.round(width * dpr)) c.width = Math.round(width * dpr);
    c.height = Math.round(height * dpr);
    const g = c.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, width, height);
    const left = 44, right = 16, top = 8, bottom = 20;
    const w = width - left - right, hgt = height - top - bottom;
    const [max, steps] = niceScale(Math.max(0, ...this.points.flatMap((p) => p.values)));
    // the x axis covers what was sampled (at least a minute), up to span
    const first = this.points.length ? this.points[0].t : now;
    const shown = Math.min(this.span, Math.max(60, Math.ceil((now - first) / 1000)));
    const x = (t) => left + w * (1 - (now - t) / (shown * 1000));
    const y = (v) => top + hgt * (1 - v / max);

    g.font = "11px system-ui, sans-serif";
    g.fillStyle = "#666";
    g.strokeStyle = "#e2e2e2";
    g.lineWidth = 1;
    g.textAlign = "right";
    g.textBaseline = "middle";
    for (let i = 0; i <= steps; i++) {
      const v = (max * i) / steps;
      g.beginPath();
      g.moveTo(left, Math.round(y(v)) + 0.5);
      g.lineTo(left + w, Math.round(y(v)) + 0.5);
      g.stroke();
      g.fillText(label(v) + this.unit, left - 4, y(v));
    }
    g.textBaseline = "top";
    const step = TICKS.find((t) => shown / t <= 6) ?? this.span / 5;
    for (let sec = 0; sec <= shown; sec += step) {
      g.textAlign = !sec ? "right" : sec + step > shown ? "left" : "center";
      const text = sec ? `-${sec >= 60 ? `${+(sec / 60).toFixed(1)}m` : `${sec}s`}` : "now";
      g.fillText(text, x(now - sec * 1000) + (sec ? 0 : 8), top + hgt + 5);
    }
    this.series.forEach((_, i) => {
      g.strokeStyle = COLORS[i % COLORS.length];
      g.lineWidth = 2;
      g.beginPath();
      this.points.forEach((p, j) => {
        const px = x(p.t), py = y(p.values[i] ?? 0);
        if (j) g.lineTo(px, py); else g.moveTo(px, py);
      });
      if (this.points.length === 1) g.arc(x(this.points[0].t), y(this.points[0].values[i] ?? 0), 1.5, 0, 7);
      g.stroke();
    });
  }
}
