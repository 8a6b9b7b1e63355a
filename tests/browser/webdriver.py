"""A minimal W3C WebDriver client (Python stdlib only) for Debian's chromium through
chromedriver, plus what the browser tests share: waiting for a condition, screenshots checked
for real content (a PNG decoder: zlib + the five row filters), and a check that a page
fetched nothing from anywhere but its own server."""
import base64
import json
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import zlib

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
ELEMENT = "element-6066-11e4-a52e-4f735466cecf"


class Failure(Exception):
    pass


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Browser:
    """One headless chromium session; use as a context manager."""

    def __init__(self, width=1280, height=900):
        for exe in (CHROMIUM, CHROMEDRIVER):
            if not os.access(exe, os.X_OK):
                raise Failure(f"{exe} is missing: install the test dependencies (scripts/install-deps.sh: chromium chromium-driver)")
        self.profile = tempfile.mkdtemp(prefix="llmrun-chromium-")
        # free_port() lets the port go before chromedriver binds it, and a test running beside
        # this one (ctest -j) may take it first: chromedriver then exits, and a new port is tried.
        for attempt in range(5):
            self.port = free_port()
            self.driver = subprocess.Popen([CHROMEDRIVER, f"--port={self.port}"], stdout=subprocess.DEVNULL,
                                           stderr=subprocess.DEVNULL)
            self.base = f"http://127.0.0.1:{self.port}"
            if self._wait_ready():
                break
        else:
            raise Failure("chromedriver exited at start 5 times (ports taken?)")
        caps = {"browserName": "chrome", "goog:chromeOptions": {"binary": CHROMIUM, "args": [
            "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
            "--disable-extensions", "--disable-background-networking", "--disable-sync",
            f"--window-size={width},{height}", f"--user-data-dir={self.profile}"]}}
        self.session = self._call("POST", "/session", {"capabilities": {"alwaysMatch": caps}})["sessionId"]

    def _wait_ready(self):
        """True once chromedriver answers, False if it exited first."""
        deadline = time.time() + 120  # a loaded 2-core machine starts it slowly
        while True:
            try:
                if self._call("GET", "/status")["ready"]:
                    return True
            except (OSError, urllib.error.URLError, Failure):  # Failure: another server's answer
                pass
            if self.driver.poll() is not None:
                return False
            if time.time() > deadline:
                self.driver.kill()
                raise Failure("chromedriver did not start")
            time.sleep(0.1)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        try:
            self._call("DELETE", f"/session/{self.session}")
        except Exception:
            pass
        self.driver.terminate()
        try:
            self.driver.wait(10)
        except subprocess.TimeoutExpired:
            self.driver.kill()
        shutil.rmtree(self.profile, ignore_errors=True)

    def _call(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return json.loads(resp.read())["value"]
        except urllib.error.HTTPError as e:
            raise Failure(f"webdriver {method} {path}: {e.read().decode(errors='replace')[:500]}")

    def s(self, method, path, body=None):
        return self._call(method, f"/session/{self.session}{path}", body)

    def get(self, url):
        self.s("POST", "/url", {"url": url})

    def js(self, script, *args):
        return self.s("POST", "/execute/sync", {"script": script, "args": list(args)})

    def find(self, css):
        return self.s("POST", "/element", {"using": "css selector", "value": css})[ELEMENT]

    def type(self, css, text):
        self.s("POST", f"/element/{self.find(css)}/value", {"text": text})

    def click(self, css):
        self.s("POST", f"/element/{self.find(css)}/click", {})

    def text(self, css):
        return self.js("const e = document.querySelector(arguments[0]); return e ? e.textContent : null;", css)

    def wait(self, what, script, *args, timeout=90):
        """Polls a JS expression (a function body returning a value) until it is truthy. The
        timeout only bounds a failure: a loaded machine can take tens of seconds to render."""
        deadline = time.time() + timeout
        while True:
            v = self.js(script, *args)
            if v:
                return v
            if time.time() > deadline:
                raise Failure(f"timed out waiting for {what}")
            time.sleep(0.1)

    def screenshot(self, path):
        png = base64.b64decode(self.s("GET", "/screenshot"))
        with open(path, "wb") as f:
            f.write(png)
        return png

    def foreign_requests(self, origin):
        """Resources the page fetched from anywhere but `origin` (performance entries)."""
        names = self.js("return [location.href].concat(performance.getEntriesByType('resource').map(e => e.name));")
        return [n for n in names if not n.startswith(origin + "/")]


def png_pixels(png):
    """(width, height, rows of RGB(A) byte strings) of an 8-bit RGB or RGBA PNG."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width = 8, b"", None
    while pos < len(png):
        n, kind = struct.unpack(">I4s", png[pos:pos + 8])
        chunk = png[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", chunk[:10])
            assert depth == 8 and color in (2, 6), f"unexpected PNG format depth {depth} color {color}"
            bpp = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, bpp, rows


def check_screenshot(png, what, min_colors=8, min_busy_rows=0.2):
    """The screenshot shows a drawn page: many colours, and content on a good share of rows
    (a blank or one-colour page fails)."""
    w, h, bpp, rows = png_pixels(png)
    colors, busy = set(), 0
    for row in rows[::2]:
        # (the right edge may hold a scrollbar, which would make every row look busy)
        px = {row[i:i + 3] for i in range(0, (w - 24) * bpp, bpp * 2)}
        colors |= px
        busy += len(px) > 1
    share = busy / len(rows[::2])
    if len(colors) < min_colors or share < min_busy_rows:
        raise Failure(f"{what}: the screenshot looks empty ({len(colors)} colours, {share:.0%} of rows with content)")
    return len(colors), share
