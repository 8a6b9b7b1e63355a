# The browser pages (web/) reach nothing but their own server: no absolute or
# protocol-relative URL anywhere in their files, every file they reference is served by the
# binary itself, byte for byte the file in web/ (both `serve` at / and `dashboard`).
source "$(dirname "$0")/common.bash"
source "$(dirname "$0")/serve_common.bash"
/usr/bin/python3 - "$SRC/web" <<'PY' || fail "a page names an outside address"
import os, re, sys
root = sys.argv[1]
# Anything a browser could fetch from elsewhere: scheme://, protocol-relative //host in an
# attribute, CSS url()/@import, or a fetch/EventSource/WebSocket of a literal non-root path.
patterns = [re.compile(p, re.I) for p in (
    r"[a-z][a-z0-9+.-]*://", r"""(src|href|action)\s*=\s*["']?\s*//""", r"""url\(\s*["']?\s*(//|[a-z]+:)""",
    r"@import", r"""(fetch|EventSource|WebSocket)\(\s*["'](?!/)""", r"""(src|href)\s*=\s*["'](?!/|#)""")]
found = 0
for d, _, files in os.walk(root):
    for f in files:
        path = os.path.join(d, f)
        for n, line in enumerate(open(path, encoding="utf-8"), 1):
            for p in patterns:
                if p.search(line):
                    print(f"{os.path.relpath(path, root)}:{n}: {line.strip()}")
                    found += 1
assert found == 0, f"{found} outside references"
# The checker catches what it is for.
bad = ['<script src="https://cdn.example/x.js">', '<link href="//cdn.example/x.css">', "fetch('http://x')",
       "body { background: url(https://x/y.png) }", '<img src="logo.png">']
assert all(any(p.search(b) for p in patterns) for b in bad)
PY

# Every local reference resolves on both servers, to the bytes of web/.
LLMRUN_PRINTABLE_ONLY=1 "$MAKE_MODEL" "$WORK/tiny" gpt2 1 32 2 64 256 4 chatml
start_server "$WORK/serve.log" "$WORK/tiny" --threads 1
mkdir -p "$WORK/runs"
"$LLMRUN" dashboard "$WORK/runs" --port 0 2>"$WORK/dash.log" & DASH_PID=$!
trap 'stop_server; kill $DASH_PID 2>/dev/null; rm -rf "$WORK"' EXIT
for _ in $(seq 600); do  # up to 60 s: a loaded machine starts slowly
  kill -0 $DASH_PID 2>/dev/null || { cat "$WORK/dash.log"; fail "dashboard exited"; }
  DPORT=$(grep -so 'on http://127.0.0.1:[0-9]*' "$WORK/dash.log" | grep -o '[0-9]*$' || true)
  [ -n "$DPORT" ] && break
  sleep 0.1
done
[ -n "$DPORT" ] || { cat "$WORK/dash.log"; fail "dashboard did not start"; }
/usr/bin/python3 - "$SRC/web" "http://127.0.0.1:$PORT" playground "http://127.0.0.1:$DPORT" dashboard <<'PY' ||
import re, sys, urllib.request
web = sys.argv[1]
for base, app in ((sys.argv[2], sys.argv[3]), (sys.argv[4], sys.argv[5])):
    with urllib.request.urlopen(base + "/") as r:
        page = r.read()
        assert r.headers["Content-Type"].startswith("text/html"), r.headers["Content-Type"]
    assert page == open(f"{web}/{app}/index.html", "rb").read(), f"{app}: / is not web/{app}/index.html"
    refs = re.findall(rb'(?:src|href)="(/[^"]*)"', page)
    assert len(refs) >= 3, refs
    for ref in refs:
        ref = ref.decode()
        local = ref[1:] if ref.startswith("/shared/") else f"{app}{ref}"
        with urllib.request.urlopen(base + ref) as r:
            assert r.read() == open(f"{web}/{local}", "rb").read(), f"{app}: {ref} differs from web/{local}"
    print(f"{app}: / and {len(refs)} referenced files served from the binary")
PY
  fail "pages served by the binary"
