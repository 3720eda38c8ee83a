// imgseq viewer: talks to the /v1/ API of the server that serves this page. No libraries.
"use strict";

const $ = (id) => document.getElementById(id);
// Everything the page knows; tests read it (window.imgseqState).
const state = {
  models: [], vq: null, file: null, tokens: null, edited: null, grid: [0, 0],
  codebook: 0, counts: new Map(), selected: new Set(), anchor: null, reconUrl: null, editUrl: null,
  decodes: 0,
  // ViT position similarity ({model, side, patches, similarity}) and the patch shown large.
  positions: null, posPatch: 0,
  // GPT stream: rows_done of each intermediate line, and whether the last line arrived.
  gptRows: [], gptDone: false,
};
window.imgseqState = state;

function status(msg, isError) {
  const s = $("status");
  s.textContent = msg;
  s.className = isError ? "error" : "";
}

function authHeaders(extra) {
  const h = Object.assign({}, extra || {});
  const t = $("token").value.trim();
  if (t) h["Authorization"] = "Bearer " + t;
  return h;
}

async function api(path, opts) {
  const o = Object.assign({}, opts || {});
  o.headers = authHeaders(o.headers);
  const r = await fetch(path, o);
  if (!r.ok) {
    let msg = r.status + " " + r.statusText;
    try { msg = (await r.json()).error || msg; } catch (e) { /* not JSON */ }
    throw new Error(msg);
  }
  return r;
}

function fill(select, names) {
  select.innerHTML = "";
  for (const n of names) {
    const o = document.createElement("option");
    o.value = o.textContent = n;
    select.appendChild(o);
  }
}

async function loadModels() {
  try {
    const j = await (await api("/v1/models")).json();
    state.models = j.models;
    const of = (k) => j.models.filter((m) => m.kind === k).map((m) => m.name);
    fill($("vq-model"), of("vq"));
    fill($("vit-model"), of("vit"));
    fill($("gpt-model"), of("gpt"));
    gptClasses();
    loadPositions();
    status("ready: " + j.models.map((m) => m.name + " (" + m.kind + ")").join(", "));
  } catch (e) {
    status("cannot list models: " + e.message, true);
  }
}

function model(name) { return state.models.find((m) => m.name === name); }

function b64png(b64) { return "data:image/png;base64," + b64; }

// --- VQ: roundtrip, grid, frequency, edit -------------------------------------------------

async function roundtrip(file) {
  state.file = file;
  const name = $("vq-model").value;
  status("encoding " + file.name + " ...");
  try {
    const q = "?model=" + encodeURIComponent(name) + ($("upscale").checked ? "&upscale=true" : "");
    const j = await (await api("/v1/roundtrip" + q, { method: "POST", body: file })).json();
    state.vq = name;
    state.tokens = j.tokens;
    state.edited = j.tokens.map((r) => r.slice());
    state.grid = j.grid;
    state.codebook = j.codebook_size;
    state.selected.clear();
    $("input-img").src = b64png(j.input_png);
    $("recon-img").src = state.reconUrl = b64png(j.reconstruction_png);
    $("edit-img").removeAttribute("src");
    $("scores").textContent = "PSNR " + j.psnr.toFixed(2) + " dB, SSIM " + j.ssim.toFixed(4);
    $("code").max = state.codebook - 1;
    countCodes();
    drawGrid();
    drawFreq();
    status(file.name + ": " + j.grid[0] + "x" + j.grid[1] + " tokens");
  } catch (e) {
    status(file.name + ": " + e.message, true);
  }
  classify(file);
}

function countCodes() {
  state.counts = new Map();
  for (const row of state.edited) for (const c of row) state.counts.set(c, (state.counts.get(c) || 0) + 1);
}

function drawGrid() {
  const cv = $("grid");
  const [h, w] = state.grid;
  cv.width = 768; cv.height = 768;
  const g = cv.getContext("2d");
  g.clearRect(0, 0, cv.width, cv.height);
  const cw = cv.width / w, ch = cv.height / h;
  g.strokeStyle = "rgba(255,255,255,0.35)";
  g.lineWidth = 1;
  for (let i = 0; i <= w; i++) { g.beginPath(); g.moveTo(i * cw, 0); g.lineTo(i * cw, cv.height); g.stroke(); }
  for (let i = 0; i <= h; i++) { g.beginPath(); g.moveTo(0, i * ch); g.lineTo(cv.width, i * ch); g.stroke(); }
  for (let r = 0; r < h; r++) for (let c = 0; c < w; c++) {
    if (state.edited[r][c] !== state.tokens[r][c]) {
      g.fillStyle = "rgba(255,160,0,0.35)"; g.fillRect(c * cw, r * ch, cw, ch);
    }
    if (state.selected.has(r + "," + c)) {
      g.strokeStyle = "#00e5ff"; g.lineWidth = 3; g.strokeRect(c * cw + 1.5, r * ch + 1.5, cw - 3, ch - 3); g.lineWidth = 1;
      g.strokeStyle = "rgba(255,255,255,0.35)";
    }
  }
}

function cellAt(ev) {
  const cv = $("grid");
  const b = cv.getBoundingClientRect();
  const [h, w] = state.grid;
  const c = Math.floor((ev.clientX - b.left) / b.width * w);
  const r = Math.floor((ev.clientY - b.top) / b.height * h);
  return (r >= 0 && r < h && c >= 0 && c < w) ? [r, c] : null;
}

function onHover(ev) {
  if (!state.edited) return;
  const rc = cellAt(ev);
  if (!rc) return;
  const code = state.edited[rc[0]][rc[1]];
  $("hover").textContent = "row " + rc[0] + ", col " + rc[1] + ", code " + code +
    ", occurs " + state.counts.get(code) + "x" + (code !== state.tokens[rc[0]][rc[1]] ? " (edited; was " + state.tokens[rc[0]][rc[1]] + ")" : "");
}

function onClick(ev) {
  if (!state.edited) return;
  const rc = cellAt(ev);
  if (!rc) return;
  if (ev.shiftKey && state.anchor) {
    const [r0, c0] = state.anchor;
    for (let r = Math.min(r0, rc[0]); r <= Math.max(r0, rc[0]); r++)
      for (let c = Math.min(c0, rc[1]); c <= Math.max(c0, rc[1]); c++) state.selected.add(r + "," + c);
  } else {
    const k = rc[0] + "," + rc[1];
    if (state.selected.has(k)) state.selected.delete(k); else state.selected.add(k);
    state.anchor = rc;
  }
  drawGrid();
}

function selectedCells() {
  return [...state.selected].map((k) => k.split(",").map(Number));
}

function setCode() {
  const v = Number($("code").value);
  if (!Number.isInteger(v) || v < 0 || v >= state.codebook) {
    status("code " + $("code").value + " is outside 0.." + (state.codebook - 1), true);
    return;
  }
  for (const [r, c] of selectedCells()) state.edited[r][c] = v;
  countCodes(); drawGrid(); drawFreq();
}

function copyRegion() {
  const cells = selectedCells();
  if (!cells.length) return;
  const r0 = Math.min(...cells.map((x) => x[0])), c0 = Math.min(...cells.map((x) => x[1]));
  const sr = Number($("src-row").value), sc = Number($("src-col").value);
  const [h, w] = state.grid;
  for (const [r, c] of cells) {
    const rr = sr + r - r0, cc = sc + c - c0;
    if (rr < 0 || rr >= h || cc < 0 || cc >= w) { status("the source region leaves the grid", true); return; }
  }
  for (const [r, c] of cells) state.edited[r][c] = state.tokens[sr + r - r0][sc + c - c0];
  countCodes(); drawGrid(); drawFreq();
}

async function decodeEdited() {
  if (!state.edited) return;
  status("decoding ...");
  try {
    const r = await api("/v1/detokenize?model=" + encodeURIComponent(state.vq), {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ tokens: state.edited }),
    });
    const blob = await r.blob();
    if (state.editUrl) URL.revokeObjectURL(state.editUrl);
    state.editUrl = URL.createObjectURL(blob);
    const img = $("edit-img");
    await new Promise((ok, bad) => { img.onload = ok; img.onerror = bad; img.src = state.editUrl; });
    drawDiff();
    state.decodes += 1;
    status("decoded the edited tokens (" + changed() + " cells changed)");
  } catch (e) {
    status("decode: " + e.message, true);
  }
}

function changed() {
  let n = 0;
  state.edited.forEach((row, r) => row.forEach((v, c) => { if (v !== state.tokens[r][c]) n++; }));
  return n;
}

function pixels(img) {
  const c = document.createElement("canvas");
  c.width = img.naturalWidth; c.height = img.naturalHeight;
  const g = c.getContext("2d");
  g.drawImage(img, 0, 0);
  return g.getImageData(0, 0, c.width, c.height);
}

function drawDiff() {
  const a = pixels($("recon-img")), b = pixels($("edit-img"));
  const cv = $("diff");
  cv.width = a.width; cv.height = a.height;
  const g = cv.getContext("2d");
  const out = g.createImageData(a.width, a.height);
  let sq = 0;
  for (let i = 0; i < a.data.length; i += 4) {
    for (let k = 0; k < 3; k++) {
      const d = a.data[i + k] - b.data[i + k];
      sq += d * d;
      out.data[i + k] = Math.min(255, Math.abs(d) * 4);
    }
    out.data[i + 3] = 255;
  }
  g.putImageData(out, 0, 0);
  const mse = sq / (a.width * a.height * 3);
  $("edit-scores").textContent = mse > 0 ? "PSNR vs reconstruction " + (10 * Math.log10(255 * 255 / mse)).toFixed(2) + " dB" : "identical";
}

function drawFreq() {
  const cv = $("freq"), g = cv.getContext("2d");
  g.clearRect(0, 0, cv.width, cv.height);
  const n = state.codebook;
  if (!n) return;
  let max = 1;
  for (const v of state.counts.values()) max = Math.max(max, v);
  const bw = cv.width / n;
  g.fillStyle = "#1565c0";
  for (const [code, v] of state.counts) {
    const hh = (cv.height - 14) * v / max;
    g.fillRect(code * bw, cv.height - hh, Math.max(1, bw), hh);
  }
  g.fillStyle = "#555"; g.font = "11px sans-serif";
  g.fillText("code 0", 2, 11); g.fillText("code " + (n - 1), cv.width - 60, 11);
  $("usage").textContent = "(" + state.counts.size + " of " + n + " codes used; tallest bar " + max + ")";
}

// --- ViT ---------------------------------------------------------------------------------

async function classify(file) {
  const name = $("vit-model").value;
  if (!name || !file) return;
  $("vit-img").src = URL.createObjectURL(file);
  try {
    const q = "?model=" + encodeURIComponent(name);
    const [top, emb] = await Promise.all([
      api("/v1/classify" + q + "&k=5", { method: "POST", body: file }).then((r) => r.json()),
      api("/v1/embed" + q, { method: "POST", body: file }).then((r) => r.json()),
    ]);
    $("topk").innerHTML = "";
    for (const t of top.top) {
      const li = document.createElement("li");
      li.textContent = t.label + "  " + (100 * t.probability).toFixed(1) + "%";
      $("topk").appendChild(li);
    }
    const side = Math.round(Math.sqrt(emb.tokens - 1));
    const cv = $("patches"); cv.width = cv.height = 384;
    const g = cv.getContext("2d");
    g.clearRect(0, 0, 384, 384);
    g.strokeStyle = "rgba(255,64,129,0.8)";
    for (let i = 0; i <= side; i++) {
      const p = i * 384 / side;
      g.beginPath(); g.moveTo(p, 0); g.lineTo(p, 384); g.stroke();
      g.beginPath(); g.moveTo(0, p); g.lineTo(384, p); g.stroke();
    }
  } catch (e) {
    $("topk").innerHTML = "<li>" + e.message + "</li>";
  }
}

// Position similarity: for every patch position, the cosine similarity of its learned
// position vector with every other position's (CLS excluded), as the ViT paper's figure.

// Viridis-like colours for t in [0, 1] (the anchors of `imgseq vit plot-positions`).
const STOPS = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
function viridis(t) {
  const x = Math.min(Math.max(t, 0), 1) * 4;
  const i = Math.min(Math.floor(x), 3), f = x - i;
  const c = (k) => Math.round(STOPS[i][k] * (1 - f) + STOPS[i + 1][k] * f);
  return "rgb(" + c(0) + "," + c(1) + "," + c(2) + ")";
}

// Draws the side x side similarity map of `patch` at (x, y), `cell` pixels per position.
function drawPosMap(g, patch, x, y, cell) {
  const p = state.positions;
  for (let j = 0; j < p.patches; j++) {
    g.fillStyle = viridis((p.similarity[patch][j] + 1) / 2);
    g.fillRect(x + (j % p.side) * cell, y + Math.floor(j / p.side) * cell, cell, cell);
  }
}

const POS_CELL = 5, POS_GAP = 3;

function drawPositions() {
  const p = state.positions;
  if (!p) return;
  const map = p.side * POS_CELL, cv = $("positions");
  cv.width = cv.height = p.side * map + (p.side + 1) * POS_GAP;
  const g = cv.getContext("2d");
  g.fillStyle = "#fff"; g.fillRect(0, 0, cv.width, cv.height);
  for (let i = 0; i < p.patches; i++) {
    const x = POS_GAP + (i % p.side) * (map + POS_GAP), y = POS_GAP + Math.floor(i / p.side) * (map + POS_GAP);
    drawPosMap(g, i, x, y, POS_CELL);
  }
  showPosition(state.posPatch);
}

// The map of one patch position, large, with its row and column.
function showPosition(patch) {
  const p = state.positions;
  if (!p || patch < 0 || patch >= p.patches) return;
  state.posPatch = patch;
  const cv = $("pos-one"), cell = Math.floor(192 / p.side);
  cv.width = cv.height = cell * p.side;
  const g = cv.getContext("2d");
  drawPosMap(g, patch, 0, 0, cell);
  const r = Math.floor(patch / p.side), c = patch % p.side;
  g.strokeStyle = "#ff4081"; g.lineWidth = 2;
  g.strokeRect(c * cell + 1, r * cell + 1, cell - 2, cell - 2);
  $("pos-label").textContent = "patch row " + r + ", column " + c + " (self-similarity 1 is the brightest cell)";
}

async function loadPositions() {
  const name = $("vit-model").value;
  if (!name) return;
  try {
    const j = await (await api("/v1/models/" + encodeURIComponent(name) + "/positions")).json();
    state.positions = j;
    drawPositions();
  } catch (e) {
    $("pos-label").textContent = "positions: " + e.message;
  }
}

// A patch under the mouse on the patch grid or on the figure of small maps.
function patchOnGrid(ev) {
  const p = state.positions;
  if (!p) return -1;
  const b = ev.target.getBoundingClientRect();
  const c = Math.floor((ev.clientX - b.left) / b.width * p.side), r = Math.floor((ev.clientY - b.top) / b.height * p.side);
  return r >= 0 && r < p.side && c >= 0 && c < p.side ? r * p.side + c : -1;
}

function patchOnFigure(ev) {
  const p = state.positions;
  if (!p) return -1;
  const cv = $("positions"), b = cv.getBoundingClientRect(), step = p.side * POS_CELL + POS_GAP;
  const x = (ev.clientX - b.left) * cv.width / b.width - POS_GAP, y = (ev.clientY - b.top) * cv.height / b.height - POS_GAP;
  const c = Math.floor(x / step), r = Math.floor(y / step);
  return r >= 0 && r < p.side && c >= 0 && c < p.side ? r * p.side + c : -1;
}

// --- GPT ---------------------------------------------------------------------------------

function gptClasses() {
  const m = model($("gpt-model").value);
  fill($("gpt-class"), m ? m.classes : []);
}

// Shows one stream line: its pictures, the rows not yet sampled shaded.
function showSamples(j) {
  const box = $("samples");
  box.innerHTML = "";
  const h = j.grid[0];
  for (const png of j.images_png) {
    const fig = document.createElement("div");
    fig.className = "sample";
    const img = document.createElement("img");
    img.src = b64png(png);
    img.alt = j.class;
    fig.appendChild(img);
    if (j.rows_done < h) {
      const veil = document.createElement("div");
      veil.className = "undecided";
      veil.style.top = (100 * j.rows_done / h) + "%";
      veil.title = "rows " + j.rows_done + ".." + (h - 1) + " not sampled yet (a copy of the last sampled row)";
      fig.appendChild(veil);
    }
    box.appendChild(fig);
  }
}

// Generates 4 images, streamed: a line per sampled row of tokens, then the finished images.
async function generate() {
  const name = $("gpt-model").value;
  if (!name) return;
  status("generating ...");
  state.gptRows = []; state.gptDone = false;
  try {
    const body = { model: name, class: $("gpt-class").value, n: 4, seed: Number($("gpt-seed").value) || 0 };
    const r = await api("/v1/sample/stream", {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
    });
    const reader = r.body.getReader(), dec = new TextDecoder();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (value) buf += dec.decode(value, { stream: true });
      let nl;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, nl); buf = buf.slice(nl + 1);
        if (!line.trim()) continue;
        const j = JSON.parse(line);
        if (j.error) throw new Error(j.error);
        showSamples(j);
        if (j.done) {
          state.gptDone = true;
          status("generated 4 x " + j.class + " (" + state.gptRows.length + " rows streamed)");
        } else {
          state.gptRows.push(j.rows_done);
          status("generating: row " + j.rows_done + " of " + j.grid[0]);
        }
      }
      if (done) break;
    }
  } catch (e) {
    status("generate: " + e.message, true);
  }
}

// --- wiring ------------------------------------------------------------------------------

$("file").addEventListener("change", (e) => { if (e.target.files[0]) roundtrip(e.target.files[0]); });
const drop = $("drop");
drop.addEventListener("dragover", (e) => { e.preventDefault(); drop.classList.add("over"); });
drop.addEventListener("dragleave", () => drop.classList.remove("over"));
drop.addEventListener("drop", (e) => {
  e.preventDefault(); drop.classList.remove("over");
  if (e.dataTransfer.files[0]) roundtrip(e.dataTransfer.files[0]);
});
$("grid").addEventListener("mousemove", onHover);
$("grid").addEventListener("click", onClick);
$("set").addEventListener("click", setCode);
$("copy").addEventListener("click", copyRegion);
$("decode").addEventListener("click", decodeEdited);
$("clear").addEventListener("click", () => { state.selected.clear(); drawGrid(); });
$("reset").addEventListener("click", () => {
  if (!state.tokens) return;
  state.edited = state.tokens.map((r) => r.slice());
  state.selected.clear(); countCodes(); drawGrid(); drawFreq();
});
$("classify").addEventListener("click", () => classify(state.file));
$("vit-model").addEventListener("change", loadPositions);
for (const [id, at] of [["patches", patchOnGrid], ["positions", patchOnFigure]]) {
  $(id).addEventListener("mousemove", (ev) => showPosition(at(ev)));
  $(id).addEventListener("click", (ev) => showPosition(at(ev)));
}
$("gpt-model").addEventListener("change", gptClasses);
$("generate").addEventListener("click", generate);
$("token").addEventListener("change", loadModels);
loadModels();
