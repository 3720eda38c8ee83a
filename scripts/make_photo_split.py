#!/usr/bin/env python3
"""Deterministic train / held-out test split of the photos in the installed Debian wallpaper
packages, for `imgseq vq train` / `imgseq vq eval`.

    python3 scripts/make_photo_split.py        # writes data/photos/{train,test,excluded}.txt

* Files come from `dpkg -L` of PACKAGES below (only .jpg / .png; gnome-backgrounds ships only
  .webp / .svg artwork — adwaita, grid, pixels, truchet, ... — so it contributes nothing).
  Preview `screenshot.*` files are dropped. Added second: `mate-backgrounds` (nature
  photos) and the Ubuntu photo contests shipped as `lomiri-wallpapers-16.04` / `-20.04`.
* KDE wallpapers ship one picture at many resolutions (`contents/images/1920x1080.jpg`, ...):
  each picture is kept once, at its largest resolution, so the same picture can never be in
  both lists (MATE's `Elephants.jpg` / `Elephants_3840x2160.jpg` likewise). Dark variants
  (`images_dark`) count as separate pictures.
* Non-photos are excluded: PNG files (the vector / rendered artwork of these packages is PNG,
  the photos are JPEG), and anything whose 128x128 thumbnail has fewer than 2000 distinct
  colours (solid colours, flat gradients, vector art).
* The lists only grow: a photo already in `train.txt` or `test.txt` stays where it is (a
  model trained on the old train list must never find a training photo in the test list).
  The first split (KDE + UKUI) held out every 5th photo by path; photos new to the lists are
  sorted by path and every 3rd of them (index 2, 5, ...) is held out, so that the test list
  reaches a dozen photos.
* Added third: photos from packages that are not wallpaper sets (`TRAIN_ONLY` below:
  each file named, reviewed by eye — photos, not the packages' artwork) and gcompris-qt-data's
  photos, which ship inside Qt resource files (`scripts/extract_photo_resources.py` unpacks
  them to `data/photos/extracted/`, listed relative to `data/photos/`). These all go to
  `train.txt`: the held-out list stays the 14 photos every figure so far was measured on, so
  PSNR stays comparable across models, and near-duplicate pairs (opencv's stereo pairs) cannot
  straddle the lists. Photos of these sources with a shorter side under 384 px (the training
  cache size) are left out.
Needs Pillow for the colour check and the size check; without it those checks are skipped (and
says so).

Fresh machine:
    apt-get install plasma-workspace-wallpapers ukui-wallpapers mate-backgrounds \
        lomiri-wallpapers-16.04 lomiri-wallpapers-20.04 tuxpaint-data opencv-doc \
        libelementary-data tuxtype-data lxqt-themes palapeli-data sddm-theme-maldives \
        python-matplotlib-data gcompris-qt-data
    python3 scripts/extract_photo_resources.py
"""
import os
import re
import subprocess
import sys

PACKAGES = [
    "plasma-workspace-wallpapers",
    "gnome-backgrounds",
    "ukui-wallpapers",
    "mate-backgrounds",
    "lomiri-wallpapers-16.04",
    "lomiri-wallpapers-20.04",
]
# Photos from packages that are not wallpaper sets: every file named (the rest of these
# packages is artwork, icons, textures or small cut-outs). Train only (see the docstring).
TRAIN_ONLY = {
    "tuxpaint-data": ("/usr/share/tuxpaint/templates", [
        "burnt_bark.jpg", "cliff.jpg", "corn_maze.jpg", "jellyfish.jpg", "lighthouse.jpg",
        "mossy_bark.jpg", "mossy_log.jpg", "mudstone.jpg", "ocean_splash.jpg",
        "ocean_waves.jpg", "redwoods_above.jpg", "rocks.jpg", "sheep.jpg", "spiders_web.jpg",
        "sun_behind_clouds.jpg", "sun_behind_leaves.jpg", "trees_above.jpg",
        "trees_at_dusk.jpg", "wool_mill_machine.jpg"]),
    "opencv-doc": ("/usr/share/doc/opencv-doc/examples", [
        "data/aero1.jpg", "data/aero3.jpg", "data/aloeL.jpg", "data/aloeR.jpg",
        "data/apple.jpg", "data/baboon.jpg", "data/board.jpg", "data/building.jpg",
        "data/chicky_512.png", "data/ela_original.jpg", "data/fruits.jpg", "data/graf1.png",
        "data/graf3.png", "data/home.jpg", "data/left.jpg", "data/leuvenA.jpg",
        "data/leuvenB.jpg", "data/licenseplate_motion.jpg", "data/orange.jpg",
        "data/right.jpg", "data/squirrel_cls.jpg", "data/stuff.jpg", "text/scenetext01.jpg",
        "text/scenetext02.jpg", "text/scenetext03.jpg", "text/scenetext04.jpg",
        "text/scenetext05.jpg", "text/scenetext06.jpg"]),
    "libelementary-data": ("/usr/share/elementary/images", [
        "insanely_huge_test_image.jpg", "mystrale_2.jpg", "panel_01.jpg", "plant_01.jpg",
        "rock_01.jpg", "rock_02.jpg", "sky_01.jpg", "sky_02.jpg", "sky_03.jpg", "sky_04.jpg",
        "twofish.jpg", "wood_01.jpg"]),
    "tuxtype-data": ("/usr/share/tuxtype/images", [f"kcas{i}.jpg" for i in range(12)]),
    "lxqt-themes": ("/usr/share/lxqt/wallpapers", [
        "Butterfly-Kenneth-Wimer.jpg", "Valendas.png", "after-the-rain.jpg", "appleflower.png",
        "beam.png", "butterfly.png", "cloud.png", "drop.png", "flowers.png", "fog.jpg",
        "this-is-not-windows.jpg"]),
    "palapeli-data": ("/usr/share/palapeli/collection", [
        "castle-maintenon.jpg", "cincinnati-bridge.jpg", "citrus-fruits.jpg",
        "european-honey-bee.jpg", "panther-chameleon-female.jpg"]),
    "sddm-theme-maldives": ("/usr/share/sddm/themes/maldives", ["background.jpg"]),
    "python-matplotlib-data": ("/usr/share/matplotlib/mpl-data/sample_data",
                               ["grace_hopper.jpg"]),
}
MIN_SHORT_SIDE = 384
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "data", "photos")
MIN_COLOURS = 2000


def package_files():
    files = []
    for pkg in PACKAGES:
        r = subprocess.run(["dpkg", "-L", pkg], capture_output=True, text=True)
        if r.returncode != 0:
            print(f"note: package {pkg} is not installed, skipped", file=sys.stderr)
            continue
        files += [l for l in r.stdout.splitlines() if re.search(r"\.(jpg|png)$", l, re.I)]
    return sorted(set(f for f in files if os.path.isfile(f)))


def picture_key(path):
    """Same picture at several resolutions → same key; value = pixel count from the name."""
    m = re.match(r"(.*/contents/images(?:_dark)?)/(\d+)x(\d+)\.\w+$", path)
    if m:
        return m.group(1), int(m.group(2)) * int(m.group(3))
    m = re.match(r"(.*/[^/]+?)_(\d+)x(\d+)(\.\w+)$", path)  # MATE: Name_3840x2160.jpg
    if m:
        return m.group(1) + m.group(4), int(m.group(2)) * int(m.group(3))
    return path, 0


def train_only_files():
    """The TRAIN_ONLY files present, then the unpacked resource photos (relative paths)."""
    files = []
    for pkg, (base, names) in TRAIN_ONLY.items():
        there = [os.path.join(base, n) for n in names if os.path.isfile(os.path.join(base, n))]
        if not there:
            print(f"note: package {pkg} is not installed, skipped", file=sys.stderr)
        files += there
    extracted = os.path.join(OUT, "extracted")
    if not os.path.isdir(extracted):
        print("note: data/photos/extracted missing (scripts/extract_photo_resources.py), "
              "skipped", file=sys.stderr)
    for d, _, names in sorted(os.walk(extracted)):
        files += [os.path.relpath(os.path.join(d, n), OUT) for n in sorted(names)
                  if not n.endswith(".part")]
    return files


def short_side(path):
    from PIL import Image

    with Image.open(path) as im:
        return min(im.size)


def read_list(name):
    path = os.path.join(OUT, f"{name}.txt")
    if not os.path.exists(path):
        return []
    with open(path) as fh:
        return [l.strip() for l in fh if l.strip() and not l.startswith("#")]


def colours(path):
    from PIL import Image

    with Image.open(path) as im:
        im = im.convert("RGB")
        im.thumbnail((128, 128))
        return len(set(im.tobytes()[i:i + 3] for i in range(0, 3 * im.width * im.height, 3)))


def main():
    best = {}
    excluded = []
    for f in package_files():
        if os.path.basename(f).startswith("screenshot."):
            continue
        key, px = picture_key(f)
        if key not in best or px > best[key][1]:
            best[key] = (f, px)
    try:
        import PIL  # noqa: F401

        have_pil = True
    except ImportError:
        have_pil = False
        print("note: Pillow not found, the colour-count check is skipped", file=sys.stderr)
    photos = []
    for key in sorted(best):
        f = best[key][0]
        if f.lower().endswith(".png"):
            excluded.append((f, "png (vector / rendered artwork)"))
            continue
        if have_pil:
            n = colours(f)
            if n < MIN_COLOURS:
                excluded.append((f, f"{n} colours in a 128px thumbnail (< {MIN_COLOURS})"))
                continue
        photos.append(f)
    old_train, old_test = read_list("train"), read_list("test")
    known = set(old_train) | set(old_test)
    new = [p for p in photos if p not in known]
    test = old_test + [p for i, p in enumerate(new) if i % 3 == 2]
    train = old_train + [p for i, p in enumerate(new) if i % 3 != 2]
    for f in train_only_files():
        full = os.path.join(OUT, f)
        if f in known:
            photos.append(f)
            continue
        side = short_side(full) if have_pil else MIN_SHORT_SIDE
        if side < MIN_SHORT_SIDE:
            excluded.append((f, f"shorter side {side} px (< {MIN_SHORT_SIDE})"))
            continue
        photos.append(f)
        new.append(f)
        train.append(f)
    missing = [p for p in old_train + old_test if p not in photos]
    if missing:
        print(f"note: {len(missing)} listed photo(s) not installed: {missing[:3]}", file=sys.stderr)
    os.makedirs(OUT, exist_ok=True)
    head = "# generated by scripts/make_photo_split.py; one image path per line\n"
    for name, lst in [("train", train), ("test", test)]:
        with open(os.path.join(OUT, f"{name}.txt"), "w") as fh:
            fh.write(head + "".join(p + "\n" for p in lst))
    with open(os.path.join(OUT, "excluded.txt"), "w") as fh:
        fh.write("# not photos (path<TAB>reason), generated by scripts/make_photo_split.py\n")
        fh.write("".join(f"{p}\t{why}\n" for p, why in excluded))
    print(f"{len(photos)} photos: {len(train)} train, {len(test)} test ({len(new)} new); "
          f"{len(excluded)} excluded")


if __name__ == "__main__":
    main()
