"""Headless Chromium for the HTML pages' tests: run it, and measure where a page's elements land.

`layout` renders a copy of a page with a script added at its end that records, once the page has
loaded and drawn its charts, the window's width and the bounding box of every element matching
each CSS selector asked for; Chromium's --dump-dom hands the result back in the DOM.
"""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (.ci/run installs it)"
)
LAYOUT_ID = "lmshards-layout"
_MEASURE = """<script>
window.addEventListener("load", () => setTimeout(() => {
  const box = (e) => { const r = e.getBoundingClientRect();
    return {left: r.left, right: r.right, top: r.top, bottom: r.bottom, text: e.textContent}; };
  const found = {};
  for (const s of %s) found[s] = Array.from(document.querySelectorAll(s), box);
  const out = document.createElement("pre");
  out.id = "%s";
  out.textContent = JSON.stringify({window: window.innerWidth, boxes: found});
  document.body.appendChild(out);
}, 500));
</script>"""


def png_colors(png: bytes) -> int:
    """Distinct RGB(A) pixel values of a PNG (8-bit, non-interlaced, as Chromium writes it)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, {}
    idat = b""
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos : pos + 4])
        kind, data = png[pos + 4 : pos + 8], png[pos + 8 : pos + 8 + length]
        idat += data if kind == b"IDAT" else b""
        chunks.setdefault(kind, data)
        pos += 12 + length
    width, height, depth, color_type = struct.unpack(">IIBB", chunks[b"IHDR"][:10])
    assert depth == 8 and color_type in (2, 6)
    channels = 3 if color_type == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * channels
    previous = bytearray(stride)
    colors = set()
    for row in range(height):
        kind = raw[row * (stride + 1)]
        line = bytearray(raw[row * (stride + 1) + 1 : (row + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up, up_left = previous[i], previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - up_left
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - up_left)
                pred = left if pa <= pb and pa <= pc else up if pb <= pc else up_left
                line[i] = (line[i] + pred) & 0xFF
        colors.update(bytes(line[i : i + channels]) for i in range(0, stride, channels * 7))
        previous = line
    return len(colors)


def chromium(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    assert CHROMIUM is not None
    return subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=10000",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def layout(page: Path, *, width: int, selectors: list[str], height: int = 1000) -> dict:
    """{"window": inner width, "boxes": {selector: [{left, right, top, bottom, text}]}} of `page`
    rendered in a window `width` px wide (from a measuring copy beside it)."""
    html = page.read_text(encoding="utf-8")
    script = _MEASURE % (json.dumps(selectors), LAYOUT_ID)
    copy = page.with_name(f"{page.stem}-measured-{width}.html")
    copy.write_text(html.replace("</body>", script + "</body>"), encoding="utf-8")
    dom = chromium("--dump-dom", f"--window-size={width},{height}", copy.as_uri()).stdout
    found = re.search(f'<pre id="{LAYOUT_ID}">(.*?)</pre>', dom, re.S)
    assert found, dom[-2000:]
    text = found[1].replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">")
    return json.loads(text.replace("&amp;", "&"))


def overlaps(a: dict, b: dict) -> bool:
    """Whether two boxes of `layout` share any area."""
    return (
        a["left"] < b["right"]
        and b["left"] < a["right"]
        and a["top"] < b["bottom"]
        and (b["top"] < a["bottom"])
    )
