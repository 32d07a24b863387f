"use strict";
// The index's question: the cells of the chosen release and generation whose settings match the
// form (an empty choice matches any value: the rule of harness/site/pages.py), grouped per lane
// and backend. Works from file://: no request, no framework; text only via textContent.
(function () {
  const data = JSON.parse(document.getElementById("site-data").textContent);
  const S = data.strings;
  const form = document.getElementById("question");
  const release = document.getElementById("q-release");
  const generation = document.getElementById("q-generation");
  const options = Array.prototype.slice.call(form.querySelectorAll("select[data-axis]"));
  const answer = document.getElementById("answer");
  const rank = {};
  data.verdicts.forEach(function (verdict, i) { rank[verdict] = i; });

  function el(tag, text, cls) {
    const node = document.createElement(tag);
    if (text !== undefined) node.textContent = text;
    if (cls) node.className = cls;
    return node;
  }

  function backendsOf(cells) {
    const groups = {};
    cells.forEach(function (cell) {
      const name = S[cell[2]];
      const group = groups[name] = groups[name] || { name: name, counts: {}, observed: {}, cells: [] };
      group.counts[S[cell[3]]] = (group.counts[S[cell[3]]] || 0) + 1;
      if (cell[4] >= 0) S[cell[4]].split(", ").forEach(function (n) { group.observed[n] = true; });
      group.cells.push(cell);
    });
    return Object.keys(groups).map(function (name) {
      const group = groups[name];
      group.verdicts = Object.keys(group.counts).sort(function (a, b) { return rank[b] - rank[a]; });
      group.passes = group.counts.pass || 0;
      return group;
    }).sort(function (a, b) {
      // Serves every matching cell, then some, then the least severe refusal; auto first, then by name.
      const score = function (g) { return g.passes === g.cells.length ? 0 : (g.passes ? 1 : 2); };
      return score(a) - score(b) || rank[a.verdicts[0]] - rank[b.verdicts[0]] ||
        (a.name !== "auto") - (b.name !== "auto") || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0);
    });
  }

  function lane(page, cells) {
    const section = el("section", undefined, "lane-answer");
    section.dataset.lane = page.lane;
    const heading = el("h3");
    const link = el("a", page.lane + " lane, vLLM " + page.release);
    link.href = page.href;
    heading.appendChild(link);
    section.appendChild(heading);
    const groups = backendsOf(cells);
    function named(g) {
      const carried = Object.keys(g.observed).sort().join(", ");
      return g.name === "auto" && carried ? "auto (vLLM picks " + carried + ")" : g.name;
    }
    const every = groups.filter(function (g) { return g.passes === g.cells.length; }).map(named);
    const some = groups.filter(function (g) { return g.passes && g.passes < g.cells.length; }).map(named);
    section.appendChild(el("p", every.length ? "Serves your draft: " + every.join(", ") :
      "No backend serves every matching cell.", "serves"));
    if (some.length) {
      section.appendChild(el("p", "Serves some of the matching cells (they differ in options left at \"any\"): " +
        some.join(", "), "partly"));
    }
    const table = el("table");
    const head = el("tr");
    ["backend", "verdicts", "draft layers carry", "cells"].forEach(function (name) { head.appendChild(el("th", name)); });
    table.appendChild(head);
    groups.forEach(function (g) {
      const tr = el("tr");
      tr.dataset.backend = g.name;
      tr.appendChild(el("td", g.name));
      tr.appendChild(el("td", data.symbols[g.verdicts[0]] + " " + g.verdicts.map(function (v) {
        return v + " " + g.counts[v];
      }).join(" · "), "verdicts v-" + g.verdicts[0]));
      tr.appendChild(el("td", Object.keys(g.observed).sort().join(", ")));
      const td = el("td");
      g.cells.slice(0, 5).forEach(function (cell) {
        const a = el("a", S[cell[5]].split("#")[1]);
        a.href = S[cell[5]];
        td.appendChild(a);
        td.appendChild(document.createTextNode(" "));
      });
      if (g.cells.length > 5) td.appendChild(document.createTextNode("… " + g.cells.length + " in all"));
      tr.appendChild(td);
      table.appendChild(tr);
    });
    section.appendChild(table);
    return section;
  }

  function apply() {
    const wanted = options.map(function (sel) { return [data.axes.indexOf(sel.dataset.axis), sel.value]; });
    const byPage = {};
    data.cells.forEach(function (cell) {
      const page = data.pages[cell[0]];
      if (page.release !== release.value || S[cell[1]] !== generation.value) return;
      if (!wanted.every(function (w) { return !w[1] || S[cell[6][w[0]]] === w[1]; })) return;
      (byPage[cell[0]] = byPage[cell[0]] || []).push(cell);
    });
    answer.textContent = "";
    const pages = Object.keys(byPage).map(Number).sort(function (a, b) { return a - b; });
    if (!pages.length) {
      answer.appendChild(el("p", "No cell of these reports answers this: no lane ran vLLM " + release.value +
        " on " + generation.value + " with these settings.", "none"));
    }
    pages.forEach(function (i) { answer.appendChild(lane(data.pages[i], byPage[i])); });
    const query = [["release", release.value], ["generation", generation.value]].concat(options.filter(function (sel) {
      return sel.value;
    }).map(function (sel) { return [sel.dataset.axis, sel.value]; }));
    // A fragment-only replace: no reload and no new history entry (replaceState is refused on file://).
    location.replace("#" + query.map(function (pair) {
      return encodeURIComponent(pair[0]) + "=" + encodeURIComponent(pair[1]);
    }).join("&"));
  }

  // A question is shareable: its answer's address carries it after the '#'.
  location.hash.slice(1).split("&").forEach(function (pair) {
    const parts = pair.split("=").map(decodeURIComponent);
    const sel = form.querySelector("select[name='" + parts[0].replace(/[^A-Za-z0-9_]/g, "") + "']");
    if (sel && Array.prototype.some.call(sel.options, function (o) { return o.value === parts[1]; })) sel.value = parts[1];
  });
  form.addEventListener("input", apply);
  apply();
})();
