"use strict";
// The lane page's filters: the grid and the cell list show the cells whose settings match, with
// the rule of harness/site/pages.py (an empty choice matches any value). Text only via textContent.
(function () {
  const data = JSON.parse(document.getElementById("site-data").textContent);
  const S = data.strings;
  const selects = Array.prototype.slice.call(document.querySelectorAll("#filters select"));
  const rows = document.querySelectorAll("#cells tbody tr");
  const rank = {};
  data.verdicts.forEach(function (verdict, i) { rank[verdict] = i; });

  function entry(td, cells) {
    td.textContent = "";
    td.className = "entry";
    if (!cells) return;
    const counts = {}, observed = {};
    cells.forEach(function (cell) {
      counts[S[cell[2]]] = (counts[S[cell[2]]] || 0) + 1;
      if (cell[3] >= 0) S[cell[3]].split(", ").forEach(function (name) { observed[name] = true; });
    });
    const verdicts = Object.keys(counts).sort(function (a, b) { return rank[b] - rank[a]; });
    td.classList.add("v-" + verdicts[0]);
    td.appendChild(document.createTextNode(data.symbols[verdicts[0]] + " " + verdicts.map(function (v) {
      return v + " " + counts[v];
    }).join(" · ")));
    const names = Object.keys(observed).sort();
    if (names.length) {
      const span = document.createElement("span");
      span.className = "muted";
      span.textContent = names.join(", ");
      td.appendChild(document.createElement("br"));
      td.appendChild(span);
    }
  }

  function apply() {
    const wanted = selects.map(function (el) { return [data.axes.indexOf(el.dataset.axis), el.value]; });
    const groups = {};
    let count = 0;
    data.cells.forEach(function (cell, i) {
      const keep = wanted.every(function (w) { return !w[1] || S[cell[4][w[0]]] === w[1]; });
      rows[i].hidden = !keep;
      if (!keep) return;
      count += 1;
      const key = "g-" + cell[1] + "-" + cell[0];
      (groups[key] = groups[key] || []).push(cell);
    });
    document.querySelectorAll("#grid td.entry").forEach(function (td) { entry(td, groups[td.id]); });
    document.getElementById("grid-count").textContent = String(count);
  }

  selects.forEach(function (el) { el.addEventListener("input", apply); });
})();
