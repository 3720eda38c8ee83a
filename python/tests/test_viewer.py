"""The web viewer of `imgseq serve` in a real browser (Debian's chromium + chromium-driver,
driven over WebDriver by selenium): upload assets/coffee.png, the grid's codes equal
`imgseq vq encode`'s, edit two cells, decode, the new image differs around them only; the ViT
position-similarity map shows the endpoint's matrix; a GPT generation shows rows as they are
sampled, then the final images.

Skips with a note where no browser, driver or selenium is installed. Set
IMGSEQ_VIEWER_SCREENSHOT=PATH to keep screenshots (docs/img/viewer.png and
docs/img/viewer-vit-gpt.png are those, PATH's stem + "-vit-gpt" the second).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from json import loads as json_load

from conftest import REPO, run_cli

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install selenium)")

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    not (CHROMIUM and DRIVER),
    reason="no chromium/chromedriver (apt-get install chromium chromium-driver)",
)

EDITS = [(5, 5), (15, 18)]


@pytest.fixture()
def server(cli):
    """`imgseq serve` on a free loopback port with the shipped models; stopped afterwards."""
    p = subprocess.Popen([cli, "serve", "--addr", "127.0.0.1:0"], stderr=subprocess.PIPE, text=True)
    try:
        t0 = time.time()
        url = None
        while url is None and time.time() - t0 < 120:
            line = p.stderr.readline()
            if not line and p.poll() is not None:
                pytest.fail(f"imgseq serve exited with {p.returncode}")
            m = re.search(r"listening on (http://\S+/)", line)
            url = m.group(1) if m else None
        assert url, "imgseq serve did not start within 120 s"
        yield url
    finally:
        p.terminate()
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()


@pytest.fixture()
def browser():
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    o = Options()
    o.binary_location = CHROMIUM
    for a in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1600,1500"]:
        o.add_argument(a)
    d = webdriver.Chrome(service=Service(DRIVER), options=o)
    d.set_script_timeout(60)
    try:
        yield d
    finally:
        d.quit()


def wait_for(d, script, timeout=120):
    t0 = time.time()
    while time.time() - t0 < timeout:
        v = d.execute_script(script)
        if v:
            return v
        time.sleep(0.2)
    status = d.execute_script("return document.getElementById('status').textContent")
    pytest.fail(f"timed out waiting for `{script}` (status: {status})")


# Test-side pixel reading (not the viewer's code): per token cell, the largest channel
# difference between the reconstruction and the edited picture.
CELL_DIFF = """
const [h, w] = arguments[0];
const px = (img) => { const c = document.createElement('canvas'); c.width = img.naturalWidth;
  c.height = img.naturalHeight; const g = c.getContext('2d'); g.drawImage(img, 0, 0);
  return g.getImageData(0, 0, c.width, c.height); };
const a = px(document.getElementById('recon-img')), b = px(document.getElementById('edit-img'));
const out = Array.from({length: h}, () => new Array(w).fill(0));
const sh = a.height / h, sw = a.width / w;
for (let y = 0; y < a.height; y++) for (let x = 0; x < a.width; x++) for (let k = 0; k < 3; k++) {
  const i = (y * a.width + x) * 4 + k, d = Math.abs(a.data[i] - b.data[i]);
  const r = Math.floor(y / sh), c = Math.floor(x / sw);
  if (d > out[r][c]) out[r][c] = d;
}
return out;
"""


def click_cell(d, r, c, grid):
    from selenium.webdriver.common.action_chains import ActionChains

    cv = d.find_element("id", "grid")
    size = cv.size
    h, w = grid
    x = (c + 0.5) * size["width"] / w - size["width"] / 2
    y = (r + 0.5) * size["height"] / h - size["height"] / 2
    ActionChains(d).move_to_element_with_offset(cv, int(x), int(y)).click().perform()


def test_viewer_grid_equals_cli_and_an_edit_changes_only_its_neighbourhood(cli, server, browser, tmp_path):
    coffee = REPO / "assets" / "coffee.png"
    npy = tmp_path / "coffee.npy"
    run_cli(cli, "vq", "encode", coffee, "-o", npy)
    want = np.load(npy)
    d = browser
    d.get(server)
    wait_for(d, "return document.getElementById('status').textContent.startsWith('ready')")
    d.find_element("id", "file").send_keys(str(coffee))
    wait_for(d, "return window.imgseqState.tokens !== null && document.getElementById('recon-img').complete")
    got = np.array(d.execute_script("return window.imgseqState.tokens"))
    assert got.shape == want.shape == (24, 24)
    assert (got == want).all(), "the viewer's grid differs from `imgseq vq encode`"
    grid = got.shape
    for r, c in EDITS:
        click_cell(d, r, c, grid)
    sel = sorted(tuple(map(int, k.split(","))) for k in d.execute_script("return [...window.imgseqState.selected]"))
    assert sel == sorted(EDITS)
    code = int((want[EDITS[0]] + 512) % 1024)
    assert code != want[EDITS[1]]
    box = d.find_element("id", "code")
    box.clear()
    box.send_keys(str(code))
    d.find_element("id", "set").click()
    d.find_element("id", "decode").click()
    wait_for(d, "return window.imgseqState.decodes === 1 && document.getElementById('edit-img').complete")
    edited = np.array(d.execute_script("return window.imgseqState.edited"))
    changed = sorted(zip(*np.nonzero(edited != want)))
    assert [tuple(map(int, x)) for x in changed] == sorted(EDITS)
    diff = np.array(d.execute_script(CELL_DIFF, list(grid)))
    yy, xx = np.mgrid[0 : grid[0], 0 : grid[1]]
    dist = np.min([np.maximum(abs(yy - r), abs(xx - c)) for r, c in EDITS], axis=0)
    near, far = diff[dist <= 2].max(), diff[dist > 2].max()
    # The decoder's group norms spread a faint change everywhere; the edit's own change is
    # many times larger and sits around the edited cells.
    assert near > 2 * far, f"difference near the edits {near}, elsewhere up to {far}"
    for r, c in EDITS:
        assert diff[max(r - 1, 0) : r + 2, max(c - 1, 0) : c + 2].max() > far, (r, c)
    shot = os.environ.get("IMGSEQ_VIEWER_SCREENSHOT")
    path = Path(shot) if shot else tmp_path / "viewer.png"
    d.save_screenshot(str(path))
    assert path.stat().st_size > 10_000


# Test-side reading of the position figure (not the viewer's code): the colour at the centre of
# cell (j) of the small map of patch (i), with the figure's layout (5-pixel cells, 3-pixel gaps).
POS_PIXEL = """
const [i, j, side] = arguments;
const cv = document.getElementById('positions'), g = cv.getContext('2d');
const map = side * 5, step = map + 3;
const x = 3 + (i % side) * step + (j % side) * 5 + 2, y = 3 + Math.floor(i / side) * step + Math.floor(j / side) * 5 + 2;
return [cv.width, Array.from(g.getImageData(x, y, 1, 1).data.slice(0, 3))];
"""

# The colour map of `imgseq vit plot-positions` (5 anchors, linear between), here to check
# what the page drew.
STOPS = np.array([[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]], float)


def viridis(t):
    x = min(max(t, 0.0), 1.0) * 4
    i = min(int(x), 3)
    f = x - i
    return np.round(STOPS[i] * (1 - f) + STOPS[i + 1] * f)


def test_viewer_position_map_and_gpt_rows_streaming(server, browser, tmp_path):
    with urllib.request.urlopen(server + "v1/models/vit/positions", timeout=30) as r:
        want = json_load(r.read())
    sim = np.array(want["similarity"])
    side = want["side"]
    assert sim.shape == (side * side, side * side) == (64, 64)
    assert np.allclose(np.diag(sim), 1, atol=1e-4) and np.allclose(sim, sim.T, atol=1e-5)
    d = browser
    d.get(server)
    wait_for(d, "return document.getElementById('status').textContent.startsWith('ready')")
    wait_for(d, "return window.imgseqState.positions !== null")
    got = np.array(d.execute_script("return window.imgseqState.positions.similarity"))
    assert got.shape == sim.shape and np.allclose(got, sim)
    # The figure: side x side maps of side x side cells, coloured by similarity.
    for i, j in [(0, 0), (0, 63), (27, 28), (63, 5), (40, 40)]:
        width, rgb = d.execute_script(POS_PIXEL, i, j, side)
        assert width == side * side * 5 + (side + 1) * 3
        assert np.abs(np.array(rgb) - viridis((sim[i, j] + 1) / 2)).max() <= 2, (i, j, rgb)
    # Hovering a patch of the grid shows its map large.
    from selenium.webdriver.common.action_chains import ActionChains

    cv = d.find_element("id", "patches")
    d.execute_script("arguments[0].scrollIntoView({block: 'center'})", cv)
    w = cv.size["width"]
    r, c = 2, 5
    ActionChains(d).move_to_element_with_offset(cv, int((c + 0.5) * w / side - w / 2), int((r + 0.5) * w / side - w / 2)).perform()
    wait_for(d, f"return window.imgseqState.posPatch === {r * side + c}")
    assert f"row {r}, column {c}" in d.find_element("id", "pos-label").text
    # GPT: rows appear as they are sampled, then the final images.
    d.find_element("id", "generate").click()
    wait_for(d, "return window.imgseqState.gptDone", timeout=180)
    rows = d.execute_script("return window.imgseqState.gptRows")
    grid = d.execute_script("return window.imgseqState.models.find((m) => m.kind === 'gpt').grid")
    assert len(rows) >= 2 and rows == sorted(set(rows)) and rows[-1] < grid[0], rows
    assert len(d.find_elements("css selector", "#samples img")) == 4
    assert not d.find_elements("css selector", "#samples .undecided")
    assert "rows streamed" in d.find_element("id", "status").text
    d.execute_script("document.getElementById('vit').scrollIntoView()")
    shot = os.environ.get("IMGSEQ_VIEWER_SCREENSHOT")
    path = Path(shot).with_name(Path(shot).stem + "-vit-gpt.png") if shot else tmp_path / "viewer-vit-gpt.png"
    d.save_screenshot(str(path))
    assert path.stat().st_size > 10_000
