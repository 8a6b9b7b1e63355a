"""Abuse checks against a running llmrun serve on 127.0.0.1. argv: PORT MODE [PID]."""
import http.client
import json
import os
import signal
import socket
import sys
import threading
import time

PORT = int(sys.argv[1])
MODE = sys.argv[2]
HOST = "127.0.0.1"


def request(method, path, body=None, headers=None, timeout=60):
    c = http.client.HTTPConnection(HOST, PORT, timeout=timeout)
    data = json.dumps(body) if isinstance(body, (dict, list)) else body
    c.request(method, path, body=data, headers=headers or {"Content-Type": "application/json"})
    r = c.getresponse()
    out = r.status, r.read()
    c.close()
    return out


def metrics():
    status, text = request("GET", "/metrics")
    assert status == 200
    values = {}
    for line in text.decode().splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


def raw(data, read=True):
    s = socket.create_connection((HOST, PORT), timeout=30)
    s.sendall(data)
    reply = b""
    if read:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            reply += chunk
    s.close()
    return reply


def completion(prompt="hi", max_tokens=3, **kw):
    body = {"model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
    body.update(kw)
    return request("POST", "/v1/completions", body)


def wait_idle():
    for _ in range(200):
        m = metrics()
        if m["llmrun:num_requests_running"] == 0 and m["llmrun:num_requests_waiting"] == 0:
            return m
        time.sleep(0.05)
    raise AssertionError("server never went idle: %r" % m)


def abuse():
    assert request("GET", "/health")[0] == 200
    # Malformed HTTP, bad JSON, wrong types, unknown routes.
    assert raw(b"THIS IS NOT HTTP\r\n\r\n").startswith(b"HTTP/1.1 400"), "garbage request line"
    st, body = request("POST", "/v1/completions", "{not json")
    assert st == 400 and json.loads(body)["error"]["type"] == "invalid_request_error", body
    assert completion(max_tokens="many")[0] == 400
    assert completion(prompt=[999999])[0] == 400
    assert request("GET", "/nowhere")[0] == 404
    # Oversized body: 413 without reading it all.
    big = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 50000000\r\n\r\n"
    assert raw(big + b"{").startswith(b"HTTP/1.1 413"), "oversized body"
    # Tokenizer routes round-trip.
    st, body = request("POST", "/tokenize", {"prompt": "héllo"})
    toks = json.loads(body)["tokens"]
    assert st == 200 and len(toks) == 6
    st, body = request("POST", "/detokenize", {"tokens": toks})
    assert json.loads(body)["prompt"] == "héllo"

    # Slow-loris: connections that trickle half a request must not block real ones.
    slow = []
    for _ in range(20):
        s = socket.create_connection((HOST, PORT))
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Len")
        slow.append(s)
    assert completion()[0] == 200, "served while slow clients hang"

    # 500 concurrent connections, every one a valid request: all answered 200.
    results = []
    lock = threading.Lock()

    def one(i):
        try:
            st, body = completion(prompt="request %d" % i, max_tokens=2 + i % 5)
            with lock:
                results.append(st)
        except Exception as e:  # noqa: BLE001 - any failure is recorded
            with lock:
                results.append(repr(e))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(500)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    bad = [r for r in results if r != 200]
    assert len(results) == 500 and not bad, "failed: %r" % bad[:5]
    for s in slow:
        s.close()

    # Long generations that together need far more than the 32-block pool: preemption, and
    # every answer still equals the same request made alone.
    alone = completion(prompt="long 7", max_tokens=60)[1]
    longs = {}

    def long_one(i):
        longs[i] = completion(prompt="long %d" % (i % 8), max_tokens=60)

    threads = [threading.Thread(target=long_one, args=(i,)) for i in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(st == 200 for st, _ in longs.values()), longs
    text = lambda b: json.loads(b)["choices"][0]["text"]
    assert text(longs[7][1]) == text(alone) and text(longs[15][1]) == text(alone), "preempted output differs"

    # Clients vanishing mid-stream: their sequences are aborted and their blocks freed.
    before = metrics()["llmrun:client_aborts_total"]
    for i in range(20):
        s = socket.create_connection((HOST, PORT), timeout=30)
        body = json.dumps({"model": "tiny", "prompt": "stream %d" % i, "max_tokens": 100, "stream": True}).encode()
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        got = b""
        while b"data:" not in got:
            got += s.recv(4096)
        s.close()
    m = wait_idle()
    assert m["llmrun:client_aborts_total"] - before >= 10, m
    assert m["llmrun:kv_cache_blocks_used"] == 0, m
    assert m["llmrun:num_preemptions_total"] > 0, "the small pool should have forced preemption"
    assert completion()[0] == 200, "still serving"
    print("abuse: ok", {k: v for k, v in m.items() if "total" in k and "bucket" not in k})


def queue():
    results = []
    lock = threading.Lock()

    def one(i):
        st, body = completion(prompt="q%d" % i, max_tokens=40)
        with lock:
            results.append((st, body))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    codes = sorted(st for st, _ in results)
    assert 200 in codes and 429 in codes, codes
    for st, body in results:
        if st == 429:
            assert json.loads(body)["error"]["message"], body
    assert wait_idle()["llmrun:kv_cache_blocks_used"] == 0
    print("queue: ok", codes)


def drain():
    pid = int(sys.argv[3])
    c = http.client.HTTPConnection(HOST, PORT, timeout=60)
    c.request("POST", "/v1/completions",
              body=json.dumps({"model": "tiny", "prompt": "drain", "max_tokens": 100, "stream": True}),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200
    first = r.readline()
    assert first.startswith(b"data:"), first
    os.kill(pid, signal.SIGTERM)
    rest = r.read()
    assert rest.rstrip().endswith(b"data: [DONE]"), rest[-200:]
    print("drain: ok")


{"abuse": abuse, "queue": queue, "drain": drain}[MODE]()
