// The charts page: each .charts block asks /api/history for its series (the broker's, or one
// group's), draws one uPlot chart per figure, and asks again every sampling interval (at least
// every second), so the lines move without a reload. A file, not inline script: the
// Content-Security-Policy allows only scripts of the dashboard's own (docs/security.md).
// window.pocketmqCharts holds each chart's uPlot instance by name (tests read what was drawn).
(function () {
  "use strict";
  const COLOURS = ["#1f5fbf", "#2e9d49", "#c2410c", "#7c3aed"];
  const charts = {};
  window.pocketmqCharts = charts;

  function number(value, unit) {
    if (value === null || value === undefined) return "–";
    if (unit === "bytes") {
      const units = [["TB", 1e12], ["GB", 1e9], ["MB", 1e6], ["kB", 1e3]];
      for (const [name, size] of units) {
        if (Math.abs(value) >= size) return (value / size).toFixed(1) + " " + name;
      }
      return value.toFixed(0) + " B";
    }
    if (Math.abs(value) >= 1e6) return (value / 1e6).toFixed(1) + "M";
    if (Math.abs(value) >= 1e4) return (value / 1e3).toFixed(0) + "k";
    if (Number.isInteger(value)) return String(value);
    return Math.abs(value) < 10 ? String(Number(value.toFixed(2))) : value.toFixed(1);
  }

  function options(figure, names, width) {
    const unit = figure.dataset.unit;
    return {
      width: width,
      height: 200,
      scales: { x: { time: true }, y: { range: (u, min, max) => [0, Math.max(1, max * 1.1)] } },
      series: [{}].concat(names.map((name, i) => ({
        label: name,
        stroke: COLOURS[i % COLOURS.length],
        width: 2,
        value: (u, v) => number(v, unit),
      }))),
      axes: [{}, { size: unit === "bytes" ? 84 : 64, values: (u, ticks) => ticks.map((v) => number(v, unit)) }],
    };
  }

  function draw(figure, answer) {
    const names = figure.dataset.series.split(" ");
    const data = [answer.times].concat(names.map((name) => answer.series[name] || []));
    const key = figure.id.replace(/^chart-/, "");
    const box = figure.querySelector(".plot");
    const existing = charts[key];
    if (existing) {
      existing.setData(data);
    } else {
      box.textContent = "";
      charts[key] = new uPlot(options(figure, names, Math.max(200, box.clientWidth)), data, box);
    }
    const points = data.slice(1).reduce((n, s) => n + s.filter((v) => v !== null).length, 0);
    figure.dataset.points = String(points);
  }

  function refresh(block) {
    const params = new URLSearchParams({ span: block.dataset.span });
    if (block.dataset.group) params.set("group", block.dataset.group);
    return fetch("/api/history?" + params, { credentials: "same-origin" })
      .then((reply) => (reply.ok ? reply.json() : Promise.reject(new Error(reply.status))))
      .then((answer) => {
        for (const figure of block.querySelectorAll("figure.chart")) draw(figure, answer);
        block.dataset.updated = String(Date.now());
      })
      .catch((error) => {
        block.dataset.error = String(error);
      });
  }

  function start() {
    if (typeof uPlot === "undefined") return;
    for (const block of document.querySelectorAll(".charts[data-span]")) {
      const every = Math.max(1, Number(block.dataset.step) || 10) * 1000;
      refresh(block).finally(() => {
        setInterval(() => refresh(block), block.dataset.span === "day" ? 60000 : every);
      });
    }
    window.addEventListener("resize", () => {
      for (const key of Object.keys(charts)) {
        const box = charts[key].root.parentNode;
        charts[key].setSize({ width: Math.max(200, box.clientWidth), height: 200 });
      }
    });
  }

  document.addEventListener("DOMContentLoaded", start);
})();
