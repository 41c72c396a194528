"""The built documentation, seen in a real browser (``make docs`` runs it after Sphinx).

    python docs/check_site.py docs/_build/html

1. Static: every page's images exist and are readable PNG/SVG files; MathJax is served from the
   build itself (equations render offline); the gallery has an executed page with a figure for
   every example script.
2. In headless Chromium (Debian's package): the index, a user-guide page, a theory page and a
   gallery page are opened; each is screenshotted into ``docs/_build/screenshots/`` and must not
   be blank; on the theory page MathJax must have typeset every equation (no TeX left as text);
   on the gallery page every image must have loaded (non-zero natural width). Chromium is taken
   from ``$CHROMIUM``, the PATH, or else Debian's packages are downloaded with ``apt-get
   download`` into ``.cache/chromium/`` (ignored) and unpacked there, without root. No browser
   is a failure, never a silent pass.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".cache" / "chromium"
# Debian 12's chromium and the libraries it needs beyond a minimal image (found with ldd).
PACKAGES = ["chromium", "chromium-common", "libopenh264-7", "libdouble-conversion3",
            "libharfbuzz-subset0", "libpulse0", "libflac12", "libopus0", "libxnvctrl0",
            "libminizip1", "libopenjp2-7", "libogg0", "libsndfile1", "libasyncns0",
            "libvorbis0a", "libvorbisenc2", "libmpg123-0", "libmp3lame0"]
PAGES = {"index": "index.html", "guide": "guide/probabilistic.html",
         "theory": "theory/efa.html", "gallery": "auto_examples/plot_02_predictive_intervals.html"}


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.images: list[str] = []
        self.scripts: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "img" and a.get("src"):
            self.images.append(a["src"])
        if tag == "script" and a.get("src"):
            self.scripts.append(a["src"])


def static_checks(site: Path) -> list[str]:
    problems = []
    pages = sorted(site.rglob("*.html"))
    if not pages:
        return [f"{site} holds no HTML pages: build the site first (make docs)"]
    for page in pages:
        tags = _Tags()
        tags.feed(page.read_text(errors="replace"))
        for src in tags.images:
            if re.match(r"^(https?:|data:)", src):
                if src.startswith("http"):
                    problems.append(f"{page.relative_to(site)}: image from the network {src}")
                continue
            target = (page.parent / src.split("#")[0].split("?")[0]).resolve()
            if not target.is_file() or target.stat().st_size == 0:
                problems.append(f"{page.relative_to(site)}: image {src} is missing or empty")
            elif target.suffix == ".png" and target.read_bytes()[:8] != b"\x89PNG\r\n\x1a\n":
                problems.append(f"{page.relative_to(site)}: image {src} is not a PNG")
        for src in tags.scripts:
            if "mathjax" in src.lower() and src.startswith("http"):
                problems.append(f"{page.relative_to(site)}: MathJax from the network ({src})")
    examples = sorted((ROOT / "examples").glob("plot_*.py"))
    for script in examples:
        page = site / "auto_examples" / f"{script.stem}.html"
        if not page.is_file():
            problems.append(f"gallery: no page for {script.name}")
            continue
        tags = _Tags()
        tags.feed(page.read_text(errors="replace"))
        if not any("sphx_glr_" in src and src.endswith(".png") for src in tags.images):
            problems.append(f"gallery: {script.name} drew no figure")
    if len(examples) < 10:
        problems.append(f"gallery: {len(examples)} examples, at least 10 expected")
    return problems


def chromium() -> tuple[list[str], dict[str, str]]:
    """The browser's command and environment; downloads Debian's packages when none is here."""
    env = dict(os.environ)
    found = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which(
        "chromium-browser")
    if found:
        return [found], env
    binary = CACHE / "root" / "usr" / "lib" / "chromium" / "chromium"
    if not binary.is_file():
        if not shutil.which("apt-get") or not shutil.which("dpkg"):
            raise RuntimeError("no Chromium: set $CHROMIUM, install Debian's chromium, or run "
                               "where apt-get and dpkg are available to fetch it")
        debs = CACHE / "debs"
        debs.mkdir(parents=True, exist_ok=True)
        got = subprocess.run(["apt-get", "download", *PACKAGES], cwd=debs, capture_output=True,
                             text=True)
        if got.returncode != 0:
            raise RuntimeError(f"apt-get download of Chromium failed: {got.stderr[-800:]}")
        for deb in sorted(debs.glob("*.deb")):
            subprocess.run(["dpkg", "-x", str(deb), str(CACHE / "root")], check=True)
    libs = sorted({str(p.parent) for p in (CACHE / "root").rglob("*.so*")})
    env["LD_LIBRARY_PATH"] = ":".join(libs + [env.get("LD_LIBRARY_PATH", "")])
    missing = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, env=env).stdout
    missing = [line.split()[0] for line in missing.splitlines() if "not found" in line]
    if missing:
        raise RuntimeError(f"Chromium needs libraries this machine lacks: {missing}")
    return [str(binary)], env


def _browse(cmd: list[str], env: dict, url: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*cmd, "--headless", "--no-sandbox", "--disable-gpu",
                           "--hide-scrollbars", "--virtual-time-budget=15000", *args, url],
                          capture_output=True, text=True, env=env, timeout=180)


def browser_checks(site: Path) -> list[str]:
    problems = []
    cmd, env = chromium()
    shots = site.parent / "screenshots"
    shots.mkdir(exist_ok=True)
    from PIL import Image

    for name, rel in PAGES.items():
        url = (site / rel).resolve().as_uri()
        if not (site / rel).is_file():
            problems.append(f"browser: {rel} was not built")
            continue
        shot = shots / f"{name}.png"
        _browse(cmd, env, url, f"--screenshot={shot}", "--window-size=1280,1600")
        if not shot.is_file():
            problems.append(f"browser: no screenshot of {rel}")
            continue
        colours = Image.open(shot).convert("L").getextrema()
        if colours[0] == colours[1]:
            problems.append(f"browser: the screenshot of {rel} is blank")
        # The DOM after scripts ran: typeset equations and loaded images, as the page shows them
        probe = ("<script>window.addEventListener('load',()=>setTimeout(()=>{"
                 "const bad=[...document.images].filter(i=>!i.complete||i.naturalWidth===0)"
                 ".map(i=>i.src);document.body.setAttribute('data-broken',JSON.stringify(bad));"
                 "},3000));</script>")
        copy = site / rel.replace(".html", ".check.html")
        copy.write_text((site / rel).read_text().replace("</head>", probe + "</head>", 1))
        try:
            dom = _browse(cmd, env, copy.resolve().as_uri(), "--dump-dom").stdout
        finally:
            copy.unlink()
        broken = re.search(r'data-broken="([^"]*)"', dom)
        if broken is None:
            problems.append(f"browser: {rel} did not finish loading")
        elif broken.group(1) != "[]":
            problems.append(f"browser: images that did not load on {rel}: {broken.group(1)}")
        if name == "theory":
            typeset = dom.count("<mjx-container")
            raw = len(re.findall(r'class="math[^"]*">\s*(\\\[|\\\(|\$)', dom))
            if typeset == 0 or raw:
                problems.append(f"browser: equations on {rel} not rendered "
                                f"({typeset} typeset, {raw} left as TeX)")
    return problems


def main(argv: list[str]) -> int:
    site = Path(argv[0] if argv else ROOT / "docs" / "_build" / "html")
    problems = static_checks(site)
    try:
        problems += browser_checks(site)
    except (RuntimeError, OSError, subprocess.SubprocessError) as err:
        problems.append(f"browser: {err}")
    for p in problems:
        print(p, file=sys.stderr)
    print(f"check_site: {'FAILED' if problems else 'ok'} ({len(problems)} problem(s); "
          f"screenshots in {site.parent / 'screenshots'})")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
