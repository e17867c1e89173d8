// report.html's script: sortable tables, the ranks' whole table, the run map, the critical
// path's strips, Perfetto. No library: the page works from disk, offline.
"use strict";
(() => {
  const DATA = JSON.parse(document.getElementById("page-data").textContent);
  const PERFETTO = "https://ui.perfetto.dev";

  // ---- tables: a click on a header sorts by that column, again the other way
  function cellValue(cell) {
    const text = cell.textContent.trim();
    const number = parseFloat(text.replace(/^[×+]/, "").replace(/,/g, ""));
    return /^[-+×]?\.?\d/.test(text) && !Number.isNaN(number) ? number : text.toLowerCase();
  }
  function compare(a, b) {
    if (typeof a === typeof b) return a < b ? -1 : a > b ? 1 : 0;
    return typeof a === "number" ? -1 : 1;  // numbers before words ("-", "n/a")
  }
  function sortBy(table, header, column) {
    const ascending = header.getAttribute("aria-sort") !== "ascending";
    table.querySelectorAll("th").forEach((th) => th.removeAttribute("aria-sort"));
    header.setAttribute("aria-sort", ascending ? "ascending" : "descending");
    const body = table.tBodies[0];
    const rows = Array.from(body.rows, (row) => [cellValue(row.cells[column]), row]);
    rows.sort((a, b) => compare(a[0], b[0]) * (ascending ? 1 : -1));
    rows.forEach(([, row]) => body.appendChild(row));
  }
  function makeSortable(table) {
    table.querySelectorAll("thead th").forEach((th, column) =>
      th.addEventListener("click", () => sortBy(table, th, column)));
  }
  document.querySelectorAll("table.sortable").forEach(makeSortable);

  function element(tag, attributes = {}, text = "") {
    const made = document.createElement(tag);
    Object.entries(attributes).forEach(([key, value]) => made.setAttribute(key, value));
    if (text) made.textContent = text;
    return made;
  }

  // ---- the ranks' whole table: report.md keeps the top rows and a line for the others
  (function allRanks() {
    const whole = DATA.ranks_table;
    const heading = Array.from(document.querySelectorAll("h2")).find((h) => h.textContent.startsWith("Step time"));
    if (!heading || !whole || !whole.rows.length) return;
    let table = heading.nextElementSibling;
    while (table && table.tagName !== "TABLE") table = table.nextElementSibling;
    if (!table || table.tBodies[0].rows.length >= whole.rows.length) return;
    const button = element("button", { id: "all-ranks" }, `Show all ${whole.rows.length} ranks`);
    button.addEventListener("click", () => {
      const full = element("table", { class: "sortable", id: "all-ranks-table" });
      const head = full.createTHead().insertRow();
      whole.columns.forEach((name) => head.appendChild(element("th", {}, name)));
      const body = full.createTBody();
      whole.rows.forEach((values) => {
        const row = body.insertRow();
        values.forEach((value) => { row.insertCell().textContent = value === null ? "-" : String(value); });
      });
      makeSortable(full);
      button.replaceWith(full);
    });
    table.after(button);
  })();

  // ---- the run map
  function decode(encoded, dtype) {
    const bytes = Uint8Array.from(atob(encoded), (c) => c.charCodeAt(0));
    if (dtype === "float32") return new Float32Array(bytes.buffer);
    if (typeof Float16Array !== "undefined") return new Float16Array(bytes.buffer);
    const halves = new Uint16Array(bytes.buffer), out = new Float32Array(halves.length);
    halves.forEach((h, i) => {
      const exponent = (h >> 10) & 31, fraction = h & 1023, sign = h >> 15 ? -1 : 1;
      out[i] = exponent === 31 ? (fraction ? NaN : sign * Infinity)
        : sign * (exponent ? 2 ** (exponent - 15) * (1 + fraction / 1024) : 2 ** -14 * (fraction / 1024));
    });
    return out;
  }
  function firstAtMost(sorted, value) {  // the last index whose value is <= value
    let low = 0, high = sorted.length - 1;
    while (low < high) {
      const middle = (low + high + 1) >> 1;
      if (sorted[middle] <= value) low = middle; else high = middle - 1;
    }
    return low;
  }
  function median(values) {
    const finite = values.filter((v) => Number.isFinite(v)).sort((a, b) => a - b);
    if (!finite.length) return NaN;
    const middle = (finite.length - 1) >> 1;
    return finite.length % 2 ? finite[middle] : (finite[middle] + finite[middle + 1]) / 2;
  }
  function colour(ratio, spread) {  // white at 1, red slower, blue faster, grey unknown
    if (!Number.isFinite(ratio)) return [220, 220, 220];
    const t = Math.max(-1, Math.min(1, (ratio - 1) / spread));
    const fade = Math.round(255 * (1 - Math.abs(t)));
    return t >= 0 ? [255, fade, fade] : [fade, fade, 255];
  }

  function RunMap(host, run) {
    const ranks = run.ranks, nodes = run.nodes;
    const decoded = (level) => ({ ...level, ms: decode(level.ms, level.dtype), ratio: decode(level.ratio, level.dtype) });
    const levels = run.levels.map(decoded);
    // every column around a slow node or segment, for its node's ranks: single cells there
    const details = (run.details || []).map(decoded).map((d) => ({
      ...d, r0: d.row_first[0], r1: d.row_first[d.rows - 1] + 1, s0: d.first[0], s1: d.last[d.columns - 1],
    }));
    const spread = run.spread || 0.5;
    const finest = levels[0];
    const firstStep = finest.first[0], lastStep = finest.last[finest.last.length - 1];
    // stages, and replicas within them: the rows come by them where the job has a layout
    const bands = run.bands || [], stages = bands.filter((b) => b.dim === "pp");
    const replicas = bands.filter((b) => b.dim !== "pp");
    const LEFT = 56, RIGHT = stages.length ? 60 : 0, BOTTOM = 22;
    const W = Math.max(400, Math.min(1200, host.clientWidth || 1000)) - LEFT - RIGHT;
    const H = Math.max(120, Math.min(520, ranks.length * 24));
    host.innerHTML = `<div class="controls">ranks <input id="runmap-ranks"> steps <input id="runmap-steps">
      <button id="runmap-zoom">Zoom</button><button id="runmap-reset">Whole run</button>
      <span class="axis" id="runmap-axis"></span></div>
      <canvas id="runmap-canvas" width="${W + LEFT + RIGHT}" height="${H + BOTTOM}"></canvas>
      <div class="tip" id="runmap-tip">Drag over the map to zoom; hover a cell to read it; click a rank for its slow segments.</div>
      <div id="runmap-rank"></div><div id="runmap-range"></div>`;
    const canvas = host.querySelector("canvas"), context = canvas.getContext("2d");
    const tip = host.querySelector("#runmap-tip");
    let view = { r0: 0, r1: ranks.length, s0: firstStep, s1: lastStep }, drawn = null;

    function covering() {  // a detail that holds every cell in view
      return details.find((d) => d.r0 <= view.r0 && view.r1 <= d.r1 && d.s0 <= view.s0 && view.s1 <= d.s1);
    }
    function chooseLevel() {
      const detail = covering();
      if (detail) return detail;
      for (const level of levels) {
        const columns = firstAtMost(level.first, view.s1) - firstAtMost(level.first, view.s0) + 1;
        const rows = Math.ceil((view.r1 - view.r0) * level.rows / ranks.length);
        if (columns <= 2 * W && rows <= 2 * H) return level;
      }
      return levels[levels.length - 1];
    }
    function cellAt(level, x, y) {  // x, y inside the plot's area
      const step = view.s0 + (x / W) * (view.s1 - view.s0 + 1);
      const index = Math.min(view.r1 - 1, view.r0 + Math.floor((y / H) * (view.r1 - view.r0)));
      const column = firstAtMost(level.first, Math.floor(step));
      const row = firstAtMost(level.row_first, index);
      return { column, row, at: row * level.columns + column };
    }
    function draw() {
      const level = chooseLevel();
      drawn = level;
      const image = context.createImageData(W, H);
      const columns = new Int32Array(W), rows = new Int32Array(H);
      for (let x = 0; x < W; x++) columns[x] = cellAt(level, x + 0.5, 0).column;
      for (let y = 0; y < H; y++) rows[y] = cellAt(level, 0, y + 0.5).row;
      for (let y = 0; y < H; y++) {
        for (let x = 0; x < W; x++) {
          const [r, g, b] = colour(level.ratio[rows[y] * level.columns + columns[x]], spread);
          const p = 4 * (y * W + x);
          image.data[p] = r; image.data[p + 1] = g; image.data[p + 2] = b; image.data[p + 3] = 255;
        }
      }
      context.clearRect(0, 0, canvas.width, canvas.height);
      context.putImageData(image, LEFT, 0);
      ticks();
      drawBands();
      drawCaptures();
      host.querySelector("#runmap-ranks").value = `${ranks[view.r0]}-${ranks[view.r1 - 1]}`;
      host.querySelector("#runmap-steps").value = `${view.s0}-${view.s1}`;
      const perCell = level.first.every((f, i) => f === level.last[i]) ? "a step a column" : "steps joined";
      host.querySelector("#runmap-axis").textContent = levels.includes(level)
        ? `level ${levels.indexOf(level)} of ${levels.length}: ${level.rows} rows × ${level.columns} columns (${perCell})`
        : `detail: ranks ${ranks[level.r0]}-${ranks[level.r1 - 1]}, steps ${level.s0}-${level.s1}, every column of their step logs`;
      rangeSummary();
    }
    function ticks() {
      context.fillStyle = "#444"; context.font = "11px sans-serif"; context.textAlign = "center";
      const span = view.s1 - view.s0 + 1, every = Math.max(1, Math.ceil(span / 8));
      for (let step = Math.ceil(view.s0 / every) * every; step <= view.s1; step += every) {
        context.fillText(String(step), LEFT + ((step - view.s0 + 0.5) / span) * W, H + 15);
      }
      context.textAlign = "right";
      const shown = view.r1 - view.r0, every2 = Math.max(1, Math.ceil(shown / 12));
      for (let index = view.r0; index < view.r1; index += every2) {
        context.fillText(String(ranks[index]), LEFT - 4, ((index - view.r0 + 0.5) / shown) * H + 4);
      }
    }
    function drawBands() {  // a line where a stage (solid) or a replica (dashed) begins; stages named
      const shown = view.r1 - view.r0, y = (row) => ((row - view.r0) / shown) * H;
      const inView = (b) => b.first > view.r0 && b.first < view.r1;
      const line = (b, width, dash, colour) => {
        context.beginPath(); context.setLineDash(dash); context.lineWidth = width; context.strokeStyle = colour;
        context.moveTo(LEFT, y(b.first)); context.lineTo(LEFT + W, y(b.first)); context.stroke();
      };
      const seen = replicas.filter(inView);
      if (seen.length <= 64) seen.forEach((b) => line(b, 1, [4, 3], "#777"));
      stages.filter(inView).forEach((b) => line(b, 2, [], "#000"));
      context.setLineDash([]);
      context.fillStyle = "#000"; context.textAlign = "left";
      stages.forEach((b) => {
        const top = Math.max(b.first, view.r0), bottom = Math.min(b.end, view.r1);
        if (bottom > top) context.fillText(b.label, LEFT + W + 6, y((top + bottom) / 2) + 4);
      });
    }
    function drawCaptures() {  // each capture taken while the job ran: its ranks' cells, dashed green
      const shown = view.r1 - view.r0, span = view.s1 - view.s0 + 1;
      context.setLineDash([5, 3]); context.lineWidth = 2; context.strokeStyle = "#2ca02c";
      DATA.captures.forEach((c) => {
        const x0 = LEFT + ((Math.max(c.first, view.s0) - view.s0) / span) * W;
        const x1 = LEFT + ((Math.min(c.last, view.s1) + 1 - view.s0) / span) * W;
        if (x1 <= x0) return;
        ranks.forEach((rank, index) => {
          if (!c.ranks.includes(rank) || index < view.r0 || index >= view.r1) return;
          context.strokeRect(x0, ((index - view.r0) / shown) * H, x1 - x0, H / shown);
        });
      });
      context.setLineDash([]);
    }
    function describe(level, cell) {
      const firstRank = level.row_first[cell.row];
      const lastRank = (cell.row + 1 < level.rows ? level.row_first[cell.row + 1] : ranks.length) - 1;
      const steps = level.first[cell.column] === level.last[cell.column]
        ? `step ${level.first[cell.column]}` : `steps ${level.first[cell.column]}-${level.last[cell.column]}`;
      const who = firstRank === lastRank ? `rank ${ranks[firstRank]} (${nodes[firstRank]})`
        : `ranks ${ranks[firstRank]}-${ranks[lastRank]}`;
      const ms = level.ms[cell.at], ratio = level.ratio[cell.at];
      const value = Number.isFinite(ms) ? `${ms.toFixed(2)} ms, ×${ratio.toFixed(2)} the other ranks' median` : "not recorded";
      return `${who}, ${steps}: ${value}${firstRank === lastRank ? "" : " (the largest ratio of the ranks joined)"}`;
    }
    function inPlot(event) {
      const box = canvas.getBoundingClientRect();
      const x = event.clientX - box.left - LEFT, y = event.clientY - box.top;
      return x >= 0 && x < W && y >= 0 && y < H ? { x, y } : null;
    }
    let pressed = null;
    canvas.addEventListener("mousemove", (event) => {
      const at = inPlot(event);
      if (at && drawn) tip.textContent = describe(drawn, cellAt(drawn, at.x, at.y));
    });
    canvas.addEventListener("mousedown", (event) => { pressed = inPlot(event); });
    canvas.addEventListener("mouseup", (event) => {
      const at = inPlot(event), from = pressed;
      pressed = null;
      if (!at || !from) return;
      if (Math.abs(at.x - from.x) < 4 && Math.abs(at.y - from.y) < 4) { showRank(at.y); return; }
      const step = (x) => Math.floor(view.s0 + (x / W) * (view.s1 - view.s0 + 1));
      const index = (y) => view.r0 + Math.floor((y / H) * (view.r1 - view.r0));
      zoom(Math.min(index(from.y), index(at.y)), Math.max(index(from.y), index(at.y)) + 1,
        Math.min(step(from.x), step(at.x)), Math.max(step(from.x), step(at.x)));
    });
    function zoom(r0, r1, s0, s1) {
      view = {
        r0: Math.max(0, r0), r1: Math.min(ranks.length, Math.max(r1, r0 + 1)),
        s0: Math.max(firstStep, s0), s1: Math.min(lastStep, Math.max(s1, s0)),
      };
      draw();
    }
    function parseRange(text) {
      const found = /^\s*(\d+)\s*(?:-\s*(\d+))?\s*$/.exec(text);
      return found ? [Number(found[1]), Number(found[2] ?? found[1])] : null;
    }
    host.querySelector("#runmap-zoom").addEventListener("click", () => {
      const rankRange = parseRange(host.querySelector("#runmap-ranks").value);
      const stepRange = parseRange(host.querySelector("#runmap-steps").value);
      if (!rankRange || !stepRange) { tip.textContent = "ranks and steps as FIRST-LAST, e.g. 0-7 and 30-60"; return; }
      // the rows from the first to the last of those ranks (by stage, rows are not in rank order)
      const inside = ranks.flatMap((rank, index) => (rank >= rankRange[0] && rank <= rankRange[1] ? [index] : []));
      const [r0, r1] = inside.length ? [inside[0], inside[inside.length - 1] + 1] : [ranks.length - 1, ranks.length];
      zoom(r0, r1, stepRange[0], stepRange[1]);
    });
    host.querySelector("#runmap-reset").addEventListener("click", () => zoom(0, ranks.length, firstStep, lastStep));
    function showRank(y) {
      const index = view.r0 + Math.floor((y / H) * (view.r1 - view.r0));
      const rank = ranks[index];
      const segments = DATA.segments.filter((s) => s.rank === rank);
      const growth = DATA.memory_growth.filter((g) => g.rank === rank);
      const panel = host.querySelector("#runmap-rank");
      panel.innerHTML = "";
      panel.appendChild(element("h3", {}, `rank ${rank} (${nodes[index]})`));
      const list = element("ul", { id: "runmap-segments" });
      segments.forEach((s) => list.appendChild(element("li", {},
        `slow in steps ${s.first}-${s.last}: +${s.excess_ms.toFixed(1)} ms a step, ×${s.ratio.toFixed(2)}`)));
      growth.forEach((g) => list.appendChild(element("li", {}, `memory: ${g.line}`)));
      DATA.captures.filter((c) => c.ranks.includes(rank)).forEach((c) => list.appendChild(element("li", {},
        `captured steps ${c.first}-${c.last}` + (c.automatic ? ` automatically: ${c.why}` : " on request"))));
      if (!segments.length && !growth.length) list.appendChild(element("li", {}, "no slow segment"));
      panel.appendChild(list);
    }
    function rangeSummary() {  // the finest cells within the view: a detail's where one holds it
      const source = covering() || levels[0];
      const columns = [];
      source.first.forEach((first, c) => { if (first >= view.s0 && source.last[c] <= view.s1) columns.push(c); });
      const rows = [];
      for (let index = view.r0; index < view.r1 && rows.length < 64; index++) {
        const row = firstAtMost(source.row_first, index);
        rows.push([ranks[index], nodes[index], median(columns.map((c) => source.ms[row * source.columns + c])),
          median(columns.map((c) => source.ratio[row * source.columns + c]))]);
      }
      const table = element("table", { class: "sortable", id: "runmap-range-table" });
      const head = table.createTHead().insertRow();
      ["rank", "node", "median ms", "median ×"].forEach((name) => head.appendChild(element("th", {}, name)));
      const body = table.createTBody();
      rows.forEach(([rank, node, ms, ratio]) => {
        const row = body.insertRow();
        row.dataset.rank = rank; row.dataset.ms = ms;
        [rank, node, ms.toFixed(2), ratio.toFixed(3)].forEach((v) => { row.insertCell().textContent = String(v); });
      });
      makeSortable(table);
      const panel = host.querySelector("#runmap-range");
      panel.innerHTML = "";
      const more = view.r1 - view.r0 > rows.length ? ` (the first ${rows.length} of ${view.r1 - view.r0} ranks)` : "";
      panel.appendChild(element("p", {}, `Steps ${view.s0}-${view.s1}, ${columns.length} columns${more}:`));
      panel.appendChild(table);
    }
    draw();
    return { zoom, draw, view: () => view };
  }
  const host = document.getElementById("runmap");
  if (host && DATA.run) window.runMap = RunMap(host, DATA.run);

  // ---- the critical path: a strip per step, the segment under the pointer named
  (function criticalPath() {
    const steps = DATA.critical_path;
    const heading = Array.from(document.querySelectorAll("h2")).find((h) => h.id.startsWith("what-limits-the-step"));
    if (!steps.length || !heading) return;
    const box = element("div", { id: "critical-path" });
    const tip = element("div", { id: "path-tip", class: "tip" }, "Hover a segment of a step's path to name it.");
    steps.forEach((step) => {
      const row = element("div", { class: "path-row" });
      row.appendChild(element("span", { class: "label" }, `step ${step.step}: ${step.ms.toFixed(2)} ms`));
      const strip = element("div", { class: "path-strip", "data-step": step.step });
      const total = step.segments.reduce((sum, s) => sum + (s.end_us - s.start_us), 0) || 1;
      step.segments.forEach((s) => {
        const span = element("span", { class: `kind-${s.kind}` });
        span.style.flex = `${(s.end_us - s.start_us) / total} 0 0`;
        span.title = `rank ${s.rank}, ${s.kind}${s.phase ? ", " + s.phase : ""}: ${s.name}, ${((s.end_us - s.start_us) / 1e3).toFixed(3)} ms`;
        span.addEventListener("mouseover", () => { tip.textContent = `step ${step.step}: ${span.title}`; });
        strip.appendChild(span);
      });
      row.appendChild(strip);
      box.appendChild(row);
    });
    box.appendChild(tip);
    let next = heading.nextElementSibling;
    while (next && next.tagName !== "P") next = next.nextElementSibling;
    (next || heading).after(box);
  })();

  // ---- the replay: S as a heat map (a hot row: a stage; a hot cell: a rank), and each rank's
  // step as measured beside the step replayed in the what-if chosen
  (function replayed() {
    const replay = DATA.replay;
    const heading = Array.from(document.querySelectorAll("h2")).find((h) => h.id.startsWith("what-limits-the-step"));
    if (!replay || !heading) return;
    const box = element("div", { id: "replay" });
    const heat = replay.heat;
    const names = { pp: "stage", dp: "replica", rank: "rank", step: "step" };
    const spread = Math.max(0.05, ...heat.values.flat().filter((v) => v !== null).map((v) => Math.abs(v - 1)));
    const table = element("table", { id: "replay-heat", class: "heat" });
    table.appendChild(element("caption", {}, `S by ${names[heat.rows]} × ${names[heat.columns]}: its ranks as measured, the rest ideal`));
    const head = table.createTHead().insertRow();
    head.appendChild(element("th", {}, `${names[heat.rows]} \\ ${names[heat.columns]}`));
    heat.column_labels.forEach((label) => head.appendChild(element("th", {}, String(label))));
    const body = table.createTBody();
    heat.values.forEach((values, row) => {
      const line = body.insertRow();
      line.appendChild(element("th", {}, String(heat.row_labels[row])));
      values.forEach((value, column) => {
        const cell = line.insertCell();
        cell.textContent = value === null ? "-" : value.toFixed(2);
        cell.style.background = `rgb(${colour(value === null ? NaN : value, spread).join(",")})`;
        cell.title = `${names[heat.rows]} ${heat.row_labels[row]}, ${names[heat.columns]} ${heat.column_labels[column]}: S ${cell.textContent}`;
      });
    });
    box.appendChild(table);
    const strips = replay.strips;
    const label = (v) => v.rank !== null ? `rank ${v.rank} like its peers` : v.coordinate !== null ? `stage ${v.coordinate.split(" ").pop()} like the median stage` : v.what;
    const chooser = element("select", { id: "what-if" });
    strips.variants.forEach((v, index) => { if (v.what !== "measured") chooser.appendChild(element("option", { value: index }, label(v))); });
    const pick = element("label", {}, "What if: ");
    pick.appendChild(chooser);
    box.appendChild(pick);
    box.appendChild(element("span", { class: "strips-key" }, " each rank's step from its start: its work (blue) and, after it, the time it waited in all (red), summed, not in their order"));
    const lanes = element("div", { id: "replay-strips" });
    box.appendChild(lanes);
    const measured = strips.variants.find((v) => v.what === "measured");
    function draw() {
      const chosen = strips.variants[Number(chooser.value)];
      const longest = Math.max(...measured.end_ms, ...chosen.end_ms) || 1;
      lanes.replaceChildren();
      [["measured", measured], [label(chosen), chosen]].forEach(([name, v]) => {
        const step = Math.max(...v.end_ms);
        lanes.appendChild(element("div", { class: "strips-title" }, `${name}: ${step.toFixed(2)} ms a step`));
        strips.ranks.forEach((rank, row) => {
          const line = element("div", { class: "path-row", "data-rank": rank });
          line.appendChild(element("span", { class: "label" }, `rank ${rank}`));
          const strip = element("div", { class: "path-strip" });
          const start = strips.start_ms[row], end = v.end_ms[row], work = Math.min(v.work_ms[row], end - start);
          [["idle", start], ["work", work], ["wait", end - start - work], ["idle", longest - end]].forEach(([kind, ms]) => {
            const span = element("span", { class: `replay-${kind}` });
            span.style.flex = `${Math.max(ms, 0) / longest} 0 0`;
            span.title = `rank ${rank}: ${kind} ${ms.toFixed(2)} ms`;
            strip.appendChild(span);
          });
          line.appendChild(strip);
          lanes.appendChild(line);
        });
      });
    }
    chooser.addEventListener("change", draw);
    if (chooser.options.length) draw();
    let next = heading.nextElementSibling;
    while (next && next.tagName !== "P") next = next.nextElementSibling;
    (next || heading).after(box);
  })();

  // ---- Perfetto: the file chosen here, posted to ui.perfetto.dev once it answers
  const chooser = document.getElementById("perfetto-file");
  if (chooser) chooser.addEventListener("change", async () => {
    const file = chooser.files[0];
    if (!file) return;
    const buffer = await file.arrayBuffer();
    const tab = window.open(PERFETTO);
    const ping = setInterval(() => tab && tab.postMessage("PING", PERFETTO), 50);
    window.addEventListener("message", function answered(event) {
      if (event.source !== tab || event.data !== "PONG") return;
      clearInterval(ping);
      window.removeEventListener("message", answered);
      tab.postMessage({ perfetto: { buffer, title: document.title, fileName: file.name } }, PERFETTO);
    });
  });
})();
