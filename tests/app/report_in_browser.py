#!/usr/bin/env python3
"""keel's HTML reports in a real browser: each page loads without an error and every chart draws.

    python3 tests/app/report_in_browser.py REPORT.html [REPORT.html ...]
    python3 tests/app/report_in_browser.py --self-test

For each page, headless Chromium (Debian's `chromium`; `bash .ci/setup --test` installs it) is
driven over the DevTools protocol on a pipe (no network, no third-party package): the page loads
from its file, and the check fails on
  - any script exception, console error or browser log error while it loads;
  - any request for something other than the page itself (a report is one self-contained file);
  - an <svg> whose markup does not parse as XML;
  - a chart with no size, or whose screenshot is blank: every <svg> is captured where it is drawn,
    after opening every <details> and for each position of every radio switch (the report's
    max |logit| / max range toggle), and must have drawn something besides its background
    (at least 0.5% of its pixels darker than near-white).
--self-test: the check passes a good page and fails, each for its own reason, a page with a
malformed SVG, one with a blank chart, one with a script error and one that loads a resource.
Exit status: 0 when every page passes, 1 otherwise (each failure named), 2 without Chromium.
"""
import base64, fcntl, json, os, shutil, struct, subprocess, sys, tempfile, xml.etree.ElementTree as ET, zlib

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
# Charts are captured at half size: a quarter of the pixels to decode, and still a few percent of
# them drawn in every chart of a real report (the title and axes alone are more than 0.5%).
SCALE = 0.5


class Browser:
    """Headless Chromium with --remote-debugging-pipe: JSON messages, each ended by a NUL byte."""

    def __init__(self, exe):
        self.dir = tempfile.mkdtemp(prefix="keel-browser-")
        to_r, self.to_w = os.pipe()
        self.from_r, from_w = os.pipe()
        flags = ["--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
                 "--remote-debugging-pipe", "--user-data-dir=" + self.dir, "--hide-scrollbars",
                 "--force-device-scale-factor=1", "--window-size=1280,900", "about:blank"]
        # The pipe's ends become fds 3 (commands in) and 4 (replies out) of the browser; through
        # copies above 4 first, so that neither move overwrites the other's source.
        def child():
            a, b = fcntl.fcntl(to_r, fcntl.F_DUPFD, 5), fcntl.fcntl(from_w, fcntl.F_DUPFD, 5)
            os.dup2(a, 3)
            os.dup2(b, 4)
        self.proc = subprocess.Popen([exe] + flags, pass_fds=(3, 4), preexec_fn=child, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        os.close(to_r), os.close(from_w)
        self.buf, self.next_id, self.events, self.session = b"", 0, [], None

    def _read(self):
        while b"\0" not in self.buf:
            chunk = os.read(self.from_r, 1 << 20)
            if not chunk:
                raise RuntimeError("the browser closed its pipe")
            self.buf += chunk
        msg, self.buf = self.buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method, params=None, session=True):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        os.write(self.to_w, json.dumps(msg).encode() + b"\0")
        while True:
            m = self._read()
            if m.get("id") == self.next_id:
                if "error" in m:
                    raise RuntimeError("%s: %s" % (method, m["error"]))
                return m.get("result", {})
            self.events.append(m)

    def wait_for(self, method):
        for i, m in enumerate(self.events):
            if m.get("method") == method:
                return self.events.pop(i)
        while True:
            m = self._read()
            if m.get("method") == method:
                return m
            self.events.append(m)

    def open_page(self):
        target = self.call("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True},
                                 session=False)["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(domain + ".enable")

    def close(self):
        try:
            self.call("Browser.close", session=False)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def png_pixels(data):
    """A PNG (8-bit RGB or RGBA, not interlaced, as Chromium writes them) -> (width, height, rows of bytes, channels)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and color in (2, 6) and interlace == 0, "unexpected PNG format"
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw, stride, rows, prev = zlib.decompress(idat), width * channels, [], bytearray(width * channels)
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b, c = prev[i], prev[i - channels] if i >= channels else 0
            if f == 1: line[i] = (line[i] + a) & 255
            elif f == 2: line[i] = (line[i] + b) & 255
            elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(line)
        prev = line
    return width, height, rows, channels


def drawn_share(png):
    """The share of pixels darker than near-white: what a chart drew over its white background."""
    w, h, rows, ch = png_pixels(png)
    dark = sum(1 for row in rows for x in range(w) if min(row[x * ch:x * ch + 3]) < 235)
    return dark / float(max(1, w * h))


MEASURE = """(() => {
  const out = [];
  document.querySelectorAll('svg:not(svg svg)').forEach((s, i) => {
    const r = s.getBoundingClientRect();
    out.push({i, x: r.left + window.scrollX, y: r.top + window.scrollY, w: r.width, h: r.height,
              shown: r.width > 0 && r.height > 0, title: (s.querySelector('text') || {}).textContent || ''});
  });
  return JSON.stringify(out);
})()"""


def check_page(browser, path):
    """-> the failures of one page (empty when it passes)."""
    failures, url = [], "file://" + os.path.abspath(path)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    svgs = outer_svgs(text)
    for n, markup in enumerate(svgs):
        try:
            ET.fromstring(markup)
        except ET.ParseError as e:
            failures.append("svg %d does not parse: %s" % (n, e))
    browser.events.clear()
    browser.call("Page.navigate", {"url": url})
    browser.wait_for("Page.loadEventFired")
    for m in browser.events:
        kind, p = m.get("method"), m.get("params", {})
        if kind == "Runtime.exceptionThrown":
            failures.append("script error: %s" % p["exceptionDetails"].get("text", ""))
        elif kind == "Runtime.consoleAPICalled" and p.get("type") == "error":
            failures.append("console error: %s" % " ".join(str(a.get("value", "")) for a in p.get("args", [])))
        elif kind == "Log.entryAdded" and p["entry"].get("level") == "error":
            failures.append("browser error: %s" % p["entry"].get("text", ""))
        elif kind == "Network.requestWillBeSent" and p["request"]["url"] != url:
            failures.append("loads %s (a report must be self-contained)" % p["request"]["url"][:120])
    browser.call("Runtime.evaluate", {"expression": "document.querySelectorAll('details').forEach(d => d.open = true)"})
    radios = json.loads(browser.call("Runtime.evaluate", {"expression": "JSON.stringify([...document.querySelectorAll("
                                                          "'input[type=radio]')].map(r => r.id))"})["result"]["value"])
    seen = set()
    for radio in [None] + radios:
        if radio:
            browser.call("Runtime.evaluate", {"expression": "document.getElementById(%s).click()" % json.dumps(radio)})
        for c in json.loads(browser.call("Runtime.evaluate", {"expression": MEASURE})["result"]["value"]):
            if not c["shown"] or c["i"] in seen:
                continue
            seen.add(c["i"])
            shot = browser.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": {
                "x": c["x"], "y": c["y"], "width": c["w"], "height": c["h"], "scale": SCALE}})
            share = drawn_share(base64.b64decode(shot["data"]))
            if share < 0.005:
                failures.append("chart %d (%s) is blank: %.2f%% of it drawn" % (c["i"], c["title"][:60], 100 * share))
    if len(seen) != len(svgs):
        failures.append("%d of %d charts were never shown (no size under any switch position)"
                        % (len(svgs) - len(seen), len(svgs)))
    return failures, len(seen)


def outer_svgs(text):
    """The markup of every outermost <svg> element (a chart may hold an inner <svg>, its plot's clip)."""
    out, depth, start, i = [], 0, 0, 0
    while True:
        o, c = text.find("<svg", i), text.find("</svg>", i)
        if c < 0 and o < 0:
            break
        if o >= 0 and (c < 0 or o < c):
            if depth == 0:
                start = o
            depth, i = depth + 1, o + 4
        else:
            depth, i = depth - 1, c + 6
            if depth == 0:
                out.append(text[start:i])
            if depth < 0:
                out.append(text[c:i])  # a stray close: ET reports it
                depth = 0
    if depth > 0:
        out.append(text[start:])  # never closed: ET reports it
    return out


GOOD_SVG = ('<svg class="chart" width="200" height="120" viewBox="0 0 200 120"><rect width="200" height="120" '
            'fill="#fff"/><path d="M10,100 L190,20" stroke="#4e79a7" stroke-width="3" fill="none"/>'
            '<text x="20" y="20">loss</text></svg>')
PLANTED = {
    "good": GOOD_SVG,
    "malformed svg": GOOD_SVG.replace("</text>", "</txt>"),
    "blank chart": '<svg width="200" height="120"><rect width="200" height="120" fill="#fff"/></svg>',
    "script error": GOOD_SVG + "<script>undefined_function()</script>",
    "external resource": GOOD_SVG + '<img src="http://127.0.0.1:9/x.png">',
}


def self_test(browser):
    d = tempfile.mkdtemp(prefix="keel-browser-self-test-")
    ok = True
    try:
        for name, body in PLANTED.items():
            path = os.path.join(d, name.replace(" ", "_") + ".html")
            with open(path, "w") as f:
                f.write("<!DOCTYPE html><html><head><meta charset=\"utf-8\"></head><body>%s</body></html>" % body)
            failures, _ = check_page(browser, path)
            passed = not failures
            right = passed == (name == "good")
            ok &= right
            print("self-test: %-17s -> %s%s" % (name, "pass" if passed else "fail: " + "; ".join(failures),
                                               "" if right else "   WRONG"))
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return ok


def main(argv):
    exe = next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)
    if not exe:
        print("report_in_browser: no Chromium found (%s); `bash .ci/setup --test` installs Debian's chromium"
              % ", ".join(BROWSERS))
        return 2
    browser = Browser(exe)
    try:
        browser.open_page()
        if argv[1:] == ["--self-test"]:
            return 0 if self_test(browser) else 1
        bad = 0
        for path in argv[1:]:
            failures, charts = check_page(browser, path)
            print("%s: %s" % (path, "%d charts drawn, no errors" % charts if not failures else "FAILED"))
            for f in failures:
                print("  " + f)
            bad += bool(failures)
        return 1 if bad or len(argv) < 2 else 0
    finally:
        browser.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
