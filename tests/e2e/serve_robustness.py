"""Abuse checks against a running llmrun serve on 127.0.0.1. argv: PORT MODE [PID].

Modes: abuse, queue, drain (the original ones), nesting, types, http, stall, leaks, stuck,
resignal (one per class of failure found by adversarial testing; see serve_robustness.sh)."""
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


def request(method, path, body=None, headers=None, timeout=60, with_headers=False):
    c = http.client.HTTPConnection(HOST, PORT, timeout=timeout)
    data = json.dumps(body) if isinstance(body, (dict, list)) else body
    c.request(method, path, body=data, headers=headers or {"Content-Type": "application/json"})
    r = c.getresponse()
    out = r.status, r.read()
    if with_headers:
        out += ({k.lower(): v for k, v in r.getheaders()},)
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
    for _ in range(1200):  # 60 s: a loaded machine
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
    # every answer still equals the same request made alone. 24 connections at once (started
    # at a barrier), then the same prompts as one request: a prompt list is scheduled from its
    # first step, so it preempts however the threads happened to interleave.
    text = lambda b: json.loads(b)["choices"][0]["text"]
    alone = [text(completion(prompt="long %d" % i, max_tokens=60)[1]) for i in range(8)]
    longs, gate = {}, threading.Barrier(24)

    def long_one(i):
        gate.wait()
        longs[i] = completion(prompt="long %d" % (i % 8), max_tokens=60)

    threads = [threading.Thread(target=long_one, args=(i,)) for i in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(st == 200 for st, _ in longs.values()), longs
    assert all(text(longs[i][1]) == alone[i % 8] for i in range(24)), "concurrent output differs"
    st, body = completion(prompt=["long %d" % (i % 8) for i in range(24)], max_tokens=60)
    assert st == 200, body
    listed = sorted(json.loads(body)["choices"], key=lambda c: c["index"])
    assert [c["text"] for c in listed] == [alone[i % 8] for i in range(24)], "preempted output differs"

    # Clients vanishing mid-stream: their sequences are aborted and their blocks freed. A
    # stream the server finished before the client closed is no abort (a loaded machine can
    # deschedule the client that long), so rounds of 20 repeat, up to 5, until 10 aborted.
    before = metrics()["llmrun:client_aborts_total"]
    for attempt in range(5):
        for i in range(20):
            s = socket.create_connection((HOST, PORT), timeout=30)
            body = json.dumps({"model": "tiny", "prompt": "stream %d" % i, "max_tokens": 100, "stream": True}).encode()
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            got = b""
            while b"data:" not in got:
                got += s.recv(4096)
            s.close()
        m = wait_idle()
        assert m["llmrun:kv_cache_blocks_used"] == 0, m
        if m["llmrun:client_aborts_total"] - before >= 10:
            break
    assert m["llmrun:client_aborts_total"] - before >= 10, (attempt + 1, m)
    assert m["llmrun:kv_cache_blocks_used"] == 0, m
    assert m["llmrun:num_preemptions_total"] > 0, "the small pool should have forced preemption"
    assert completion()[0] == 200, "still serving"
    print("abuse: ok", {k: v for k, v in m.items() if "total" in k and "bucket" not in k})


def queue():
    # More sequences than --max-num-seqs 1 + --max-queued 0 can ever hold: 400, not 429
    # (retrying could never succeed), naming what to change.
    st, body = completion(n=2)
    assert st == 400 and json.loads(body)["error"]["param"] == "n", (st, body)
    st, body = completion(prompt=["one", "two"])
    assert st == 400 and json.loads(body)["error"]["param"] == "prompt", (st, body)
    st, body = request("POST", "/v1/chat/completions",
                       {"messages": [{"role": "user", "content": "hi"}], "n": 5, "max_tokens": 2})
    assert st == 400 and "at most 1" in json.loads(body)["error"]["message"], body

    # A burst of 8 (started at a barrier) while one runs: some get 429. Threads that a loaded
    # machine runs one after another find the slot free, so a burst repeats, up to 8 times,
    # until both answers were seen; every answer is checked.
    results = []
    lock = threading.Lock()

    def one(i, gate):
        body = {"model": "tiny", "prompt": "q%d" % i, "max_tokens": 40, "temperature": 0}
        gate.wait()
        st, body, headers = request("POST", "/v1/completions", body, with_headers=True)
        with lock:
            results.append((st, body, headers))

    for attempt in range(8):
        gate = threading.Barrier(8)
        threads = [threading.Thread(target=one, args=(i, gate)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        codes = sorted(st for st, _, _ in results)
        if 200 in codes and 429 in codes:
            break
    assert set(codes) <= {200, 429}, codes
    assert 200 in codes and 429 in codes, (attempt + 1, codes)
    for st, body, headers in results:
        if st == 429:  # a 429 says why and when to come back
            assert json.loads(body)["error"]["message"], body
            assert int(headers["retry-after"]) >= 1, headers
    assert wait_idle()["llmrun:kv_cache_blocks_used"] == 0
    print("queue: ok (%d bursts)" % (attempt + 1), codes)


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


# ------------------------------------------------------------------ nesting
def deep_array(depth):
    return "[" * depth + "]" * depth


def deep_object(depth):
    return '{"a":' * depth + "1" + "}" * depth


DEEP = deep_array(100000)  # 200 KB


def nesting():
    """Deeply nested JSON anywhere in any body: 400 naming the field, never a crash."""
    chat = '{"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":1,%s}'
    cases = [
        ("/v1/completions", '{"model": %s, "prompt": "hi"}', "model"),
        ("/v1/completions", '{"model": "tiny", "prompt": %s}', "prompt"),
        ("/v1/completions", '{"prompt": "hi", "stop_token_ids": %s}', "stop_token_ids"),
        ("/v1/completions", '{"prompt": "hi", "stop": %s}', "stop"),
        ("/v1/completions", '{"prompt": "hi", "logit_bias": {"1": %s}}', "logit_bias"),
        ("/v1/completions", '{"prompt": "hi", "n": %s}', "n"),
        ("/v1/completions", '{"prompt": "hi", "user": %s}', "user"),
        ("/v1/completions", '%s', ""),
        ("/v1/chat/completions", '{"model": "tiny", "messages": %s}', "messages"),
        ("/v1/chat/completions", '{"messages": [{"role": "user", "content": %s}]}', "messages"),
        ("/v1/chat/completions", '{"messages": [{"role": %s, "content": "x"}]}', "messages"),
        ("/v1/chat/completions", chat % '"tools": %s', "tools"),
        ("/v1/chat/completions", chat % '"tool_choice": %s', "tool_choice"),
        ("/v1/chat/completions", chat % '"response_format": {"type": "json_schema", "json_schema": %s}',
         "response_format"),
        ("/v1/chat/completions", chat % '"stream_options": %s', "stream_options"),
        ("/tokenize", '{"prompt": %s}', "prompt"),
        ("/tokenize", '{"messages": [{"role": "user", "content": [{"type": %s}]}]}', "messages"),
        ("/detokenize", '{"tokens": %s}', "tokens"),
        ("/detokenize", '{"tokens": [1, 2, %s]}', "tokens"),
    ]
    for path, template, field in cases:
        for value in (DEEP, deep_object(60000), "[" * 100000):  # arrays, objects, unterminated
            body = template.replace("%s", value)
            st, reply = request("POST", path, body)
            assert st == 400, (path, template, st, reply[:300])
            err = json.loads(reply)["error"]
            assert "nests JSON deeper than 64 levels" in err["message"], (path, template, err)
            # A body that is itself deep names its own first key, if any.
            expect = "a" if template == "%s" and value.startswith("{") else field
            assert (err["param"] or "") == expect, (path, template, err)
        assert request("GET", "/health")[0] == 200, "server died on " + template
    # Nesting inside strings is text, not depth (escaped quotes included); moderate real
    # nesting (a tool schema) is accepted.
    st, reply = completion(prompt='a\\"' + "[" * 70, max_tokens=1)
    assert st == 200, reply
    st, reply = completion(max_tokens=1, stop=["{" * 200])
    assert st == 200, reply
    schema = {"type": "object"}
    for _ in range(20):
        schema = {"type": "object", "properties": {"x": schema}}
    st, reply = request("POST", "/v1/chat/completions",
                        {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1,
                         "tools": [{"type": "function", "function": {"name": "f", "parameters": schema}}]})
    # Parsed whole: this model's plain template then has no tool-call format (a 400 naming
    # that, not the depth).
    assert st == 400 and b"no tool-call format" in reply and b"deeper" not in reply, reply
    # With a huge value in a field the server echoes, the echo is bounded too (an unknown
    # model is a 404, as in vLLM).
    st, reply = completion(model="x" * 100000)
    assert st == 404 and len(reply) < 1000, (st, len(reply))
    print("nesting: ok")


# ------------------------------------------------------------------ types
BAD_VALUES = [True, False, 0, -1, 1.5, 2 ** 64, -(2 ** 63) - 1, 1e300, "", "x", [], [1], ["x"], [[1]], {},
              {"a": 1}, [None]]


def error_of(st, reply, where):
    # A string naming no served model or adapter is a 404 (vLLM's answer), not a type error.
    unknown_model = st == 404 and " model=" in where
    assert st in (200, 400) or unknown_model, "%s: status %d %s" % (where, st, reply[:300])
    if st in (400, 404):
        err = json.loads(reply)["error"]
        want = "not_found_error" if st == 404 else "invalid_request_error"
        assert err["type"] == want and err["message"], (where, err)
        assert "json.exception" not in err["message"], (where, err)
        return err
    return None


def types():
    """Every type error in a request body is a 400 naming the field, never a 500."""
    completion_body = {"model": "tiny", "prompt": "hi", "max_tokens": 1, "temperature": 0, "n": 1,
                       "top_p": 1, "top_k": 0, "min_p": 0, "seed": 1, "presence_penalty": 0,
                       "frequency_penalty": 0, "repetition_penalty": 1, "stop": ["zz"], "stop_token_ids": [1],
                       "logit_bias": {"1": 0}, "logprobs": 1, "echo": False, "ignore_eos": False,
                       "stream": False, "best_of": 1, "suffix": None, "user": "u"}
    chat_body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1,
                 "max_completion_tokens": 1, "logprobs": True, "top_logprobs": 1, "temperature": 0,
                 "stream": False, "stream_options": None, "n": 1, "tools": [], "user": "u"}
    checked = 0
    for path, base in (("/v1/completions", completion_body), ("/v1/chat/completions", chat_body)):
        assert request("POST", path, base)[0] == 200, path
        for field in base:
            for v in BAD_VALUES:
                body = dict(base)
                body[field] = v
                err = error_of(*request("POST", path, body)[:2], where="%s %s=%r" % (path, field, v))
                if err is not None and field not in ("messages", "max_completion_tokens"):
                    assert field in err["message"] or err["param"] == field, (path, field, v, err)
                checked += 1
    # Inside chat messages and content parts: the message names the place.
    for path in ("/v1/chat/completions", "/tokenize"):
        for v in BAD_VALUES + [None]:
            for msg in ({"role": v, "content": "hi"}, {"role": "user", "content": v},
                        {"role": "user", "content": [{"type": v, "text": "hi"}]},
                        {"role": "user", "content": [{"type": "text", "text": v}]},
                        {"role": "user", "content": [v]}, v):
                err = error_of(*request("POST", path, {"messages": [msg], "max_tokens": 1})[:2],
                               where="%s %r" % (path, msg))
                if err is not None:
                    assert err["param"] == "messages", (path, msg, err)
                checked += 1
    st, reply = request("POST", "/v1/chat/completions",
                        {"messages": [{"role": "user", "content": [{"type": 5, "text": "hi"}]}]})
    assert st == 400 and "messages[0].content[0].type" in json.loads(reply)["error"]["message"], reply
    st, reply = request("POST", "/tokenize", {"messages": [{"role": "user", "content": [{"type": {}}]}]})
    assert st == 400 and "messages[0].content[0].type" in json.loads(reply)["error"]["message"], reply
    for v in BAD_VALUES:
        error_of(*request("POST", "/tokenize", {"prompt": v})[:2], where="tokenize prompt=%r" % (v,))
        error_of(*request("POST", "/detokenize", {"tokens": v})[:2], where="detokenize tokens=%r" % (v,))
        error_of(*request("POST", "/detokenize", {"tokens": [v]})[:2], where="detokenize [%r]" % (v,))
        for path in ("/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize"):
            error_of(*request("POST", path, json.dumps(v))[:2], where="%s body %r" % (path, v))
    st, reply = request("POST", "/detokenize", {"tokens": 5})
    assert st == 400 and json.loads(reply)["error"]["param"] == "tokens", reply
    st, reply = completion(stop_token_ids=3)  # a scalar is not a list of one
    assert st == 400 and json.loads(reply)["error"]["param"] == "stop_token_ids", reply
    st, reply = completion(n=2 ** 64 - 1)  # past int64: must not wrap into range
    assert st == 400 and str(2 ** 64 - 1) in json.loads(reply)["error"]["message"], reply
    # What the engine checks per generated token is bounded per request.
    st, reply = completion(stop=["s%d" % i for i in range(1000)])
    assert st == 400 and json.loads(reply)["error"]["param"] == "stop", reply
    st, reply = completion(stop=["x" * 100000])
    assert st == 400 and json.loads(reply)["error"]["param"] == "stop", reply
    st, reply = completion(stop_token_ids=[1] * 100000)
    assert st == 400 and json.loads(reply)["error"]["param"] == "stop_token_ids", reply
    assert request("GET", "/health")[0] == 200
    print("types: ok (%d bodies)" % checked)


# ------------------------------------------------------------------ HTTP details
def read_all(s):
    out = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            return out
        out += chunk


def post_raw(path, body, version="HTTP/1.1", extra=""):
    data = json.dumps(body).encode()
    return ("POST %s %s\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n" %
            (path, version, len(data), extra)).encode() + data


def http_details():
    # HTTP/1.0 + stream: close-delimited, never chunked; the server closes the connection.
    for extra in ("", "Connection: keep-alive\r\n"):
        s = socket.create_connection((HOST, PORT), timeout=30)
        s.sendall(post_raw("/v1/completions", {"prompt": "old client", "max_tokens": 8, "stream": True,
                                               "stream_options": {"include_usage": True}}, "HTTP/1.0", extra))
        reply = read_all(s)
        s.close()
        head, _, body = reply.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.0 200"), head
        assert b"transfer-encoding" not in head.lower() and b"content-length" not in head.lower(), head
        assert body.startswith(b"data: {") and body.endswith(b"data: [DONE]\n\n"), body[:100]
        events = [json.loads(l[6:]) for l in body.split(b"\n\n") if l.startswith(b"data: {")]
        assert events[-1]["usage"]["completion_tokens"] == 8, events[-1]
    # HTTP/1.0 without stream: a Content-Length body.
    s = socket.create_connection((HOST, PORT), timeout=30)
    s.sendall(post_raw("/v1/completions", {"prompt": "old client", "max_tokens": 2}, "HTTP/1.0"))
    head, _, body = read_all(s).partition(b"\r\n\r\n")
    s.close()
    assert head.startswith(b"HTTP/1.0 200") and b"content-length: %d" % len(body) in head.lower(), head
    json.loads(body)

    # HEAD: headers only (Content-Length of what GET would send). Pipelined on one connection,
    # so any body bytes would show up as garbage before the next status line.
    get_models = request("GET", "/v1/models")[1]
    s = socket.create_connection((HOST, PORT), timeout=30)
    pipeline = ["HEAD /health", "HEAD /metrics", "HEAD /v1/models", "HEAD /nowhere", "HEAD /v1/completions",
                "HEAD /tokenize"]
    s.sendall(b"".join(b"%s HTTP/1.1\r\nHost: x\r\n\r\n" % p.encode() for p in pipeline) +
              b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    reply = read_all(s)
    s.close()
    blocks = reply.split(b"\r\n\r\n")
    assert blocks[-1] == b"" and len(blocks) == len(pipeline) + 2, reply
    heads = [dict(l.lower().split(b": ", 1) for l in b.split(b"\r\n")[1:]) for b in blocks[:-1]]
    codes = [int(b.split(b" ")[1]) for b in blocks[:-1]]
    assert codes == [200, 200, 200, 404, 405, 405, 200], codes
    assert int(heads[1][b"content-length"]) > 100, heads[1]
    assert int(heads[2][b"content-length"]) == len(get_models), (heads[2], len(get_models))
    assert int(heads[3][b"content-length"]) > 0 and heads[4][b"allow"] == b"post", heads[3:5]
    st, _, hdr = request("GET", "/v1/completions", with_headers=True)
    assert st == 405 and hdr["allow"] == "POST", hdr
    st, _, hdr = request("DELETE", "/metrics", with_headers=True)
    assert st == 405 and hdr["allow"] == "GET, HEAD", hdr

    # 413 to a client that writes its whole body before reading: it still sees the status.
    big = b"{" + b" " * (6 << 20) + b"}"
    head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    s = socket.create_connection((HOST, PORT), timeout=30)
    s.sendall(head + b"Content-Length: %d\r\n\r\n" % len(big) + big)
    reply = read_all(s)
    s.close()
    assert reply.startswith(b"HTTP/1.1 413") and b"exceeds" in reply, reply[:200]
    # The same body chunked (no length up front): the limit trips mid-body.
    chunks = b"".join(b"%x\r\n" % len(big[i:i + 65536]) + big[i:i + 65536] + b"\r\n"
                      for i in range(0, len(big), 65536)) + b"0\r\n\r\n"
    s = socket.create_connection((HOST, PORT), timeout=30)
    s.sendall(head + b"Transfer-Encoding: chunked\r\n\r\n" + chunks)
    reply = read_all(s)
    s.close()
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
    # Garbage followed by a lot more garbage: the 400 arrives too.
    s = socket.create_connection((HOST, PORT), timeout=30)
    s.sendall(b"NOT HTTP AT ALL\r\n\r\n" + b"x" * (2 << 20))
    reply = read_all(s)
    s.close()
    assert reply.startswith(b"HTTP/1.1 400"), reply[:200]

    # Headers past 64 KiB (a huge cookie, a huge URL): 431, also to a client still sending.
    s = socket.create_connection((HOST, PORT), timeout=30)
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nCookie: " + b"c" * (1 << 20) + b"\r\n\r\n")
    reply = read_all(s)
    s.close()
    assert reply.startswith(b"HTTP/1.1 431"), reply[:200]
    s = socket.create_connection((HOST, PORT), timeout=30)
    s.sendall(b"GET /" + b"x" * (100 << 10) + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    reply = read_all(s)
    s.close()
    assert reply.startswith(b"HTTP/1.1 431"), reply[:200]

    # Expect: 100-continue: a body too large is refused before it is sent; a fitting one is
    # invited at once (curl otherwise waits a second).
    # (30 s socket timeouts: a refusal or invitation that never comes fails either way.)
    s = socket.create_connection((HOST, PORT), timeout=30)
    s.sendall(head + b"Content-Length: 50000000\r\nExpect: 100-continue\r\n\r\n")
    reply = read_all(s)
    s.close()
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
    s = socket.create_connection((HOST, PORT), timeout=30)
    body = json.dumps({"prompt": "hi", "max_tokens": 2}).encode()
    s.sendall(head + b"Content-Length: %d\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n" % len(body))
    got = b""
    while b"\r\n\r\n" not in got:
        got += s.recv(4096)
    assert got.startswith(b"HTTP/1.1 100 Continue\r\n\r\n"), got
    s.sendall(body)
    reply = got + read_all(s)
    s.close()
    assert reply.split(b"\r\n\r\n", 1)[1].startswith(b"HTTP/1.1 200"), reply[:300]

    # Pipelined requests are answered in order on one connection.
    s = socket.create_connection((HOST, PORT), timeout=30)
    s.sendall(post_raw("/tokenize", {"prompt": "a"}) + post_raw("/tokenize", {"prompt": "bb"}, extra="Connection: close\r\n"))
    reply = read_all(s)
    s.close()
    assert reply.count(b"HTTP/1.1 200") == 2 and reply.index(b'"count":1') < reply.index(b'"count":2'), reply
    print("http: ok")


# ------------------------------------------------------------------ clients that stop reading
def stuck_client(stream):
    """A client with a tiny receive buffer that asks for a multi-megabyte answer and never reads.

    Streamed: chat with 20 logprobs per token, on a server whose --served-model-name is 32000
    characters long (every chunk repeats it: ~33 KB per token, so 4 choices of 100 tokens make
    13 MB, far past what the kernel buffers (tcp_wmem's default maximum is 4 MB) without costing
    much generation). Not streamed: /tokenize of a 3.6 MB prompt (a 14 MB answer)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect((HOST, PORT))
    if stream:
        s.sendall(post_raw("/v1/chat/completions", {
            "messages": [{"role": "user", "content": "hi"}], "n": 4, "max_tokens": 100, "ignore_eos": True,
            "logprobs": True, "top_logprobs": 20, "stream": True}))
    else:
        s.sendall(post_raw("/tokenize", {"prompt": "hello world " * 300000}))
    return s


def wait_for(cond, what, timeout=120):  # generous: it returns as soon as cond holds
    end = time.time() + timeout
    while time.time() < end:
        m = metrics()
        if cond(m):
            return m
        time.sleep(0.1)
    raise AssertionError("timed out waiting for %s: %r" % (what, {k: v for k, v in m.items() if "bucket" not in k}))


def stall():
    """With --write-timeout 2: clients that stop reading are dropped and their work freed."""
    before = metrics()["llmrun:write_timeouts_total"]
    clients = [stuck_client(True), stuck_client(False)]
    m = wait_for(lambda m: m["llmrun:write_timeouts_total"] >= before + 2, "both writes to time out")
    m = wait_for(lambda m: m["llmrun:http_requests_in_progress"] == 1 and m["llmrun:num_requests_running"] == 0
                 and m["llmrun:num_requests_waiting"] == 0, "the stalled requests to end")
    assert m["llmrun:kv_cache_blocks_used"] == 0 and m["llmrun:http_requests_generating"] == 0, m
    for s in clients:
        s.close()
    st, _ = request("POST", "/v1/completions", {"prompt": "hi", "max_tokens": 2})
    assert st == 200, "still serving"
    print("stall: ok")


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def leaks():
    """After all the abuse: no KV block, connection or request left behind, and memory flat
    under more rounds of bad requests."""
    pid = int(sys.argv[3])
    bad = [("/v1/completions", DEEP), ("/v1/chat/completions", '{"messages":[{"role":"user","content":[{"type":5}]}]}'),
           ("/tokenize", '{"prompt": 7}'), ("/detokenize", '{"tokens": [1e9]}'), ("/v1/completions", "{nope")]

    def round_of_abuse():
        for _ in range(40):
            for path, body in bad:
                assert request("POST", path, body)[0] == 400
        assert completion(max_tokens=4)[0] == 200

    round_of_abuse()
    start = rss_kb(pid)
    for _ in range(3):
        round_of_abuse()
    grown = rss_kb(pid) - start
    assert grown < 16 * 1024, "RSS grew %d KiB over 600 more bad requests" % grown
    m = wait_for(lambda m: m["llmrun:http_open_connections"] <= 1 and m["llmrun:num_requests_running"] == 0
                 and m["llmrun:num_requests_waiting"] == 0, "connections and requests to close")
    assert m["llmrun:kv_cache_blocks_used"] == 0 and m["llmrun:http_requests_generating"] == 0, m
    print("leaks: ok (RSS %+d KiB)" % grown)


def wait_exit(pid, timeout):
    """Seconds until pid exits (a zombie counts: the test's shell reaps it)."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        try:
            with open("/proc/%d/stat" % pid) as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return time.time() - t0
        except FileNotFoundError:
            return time.time() - t0
        time.sleep(0.05)
    raise AssertionError("server %d still running %.0f s after SIGTERM" % (pid, timeout))


def stuck_setup():
    clients = [stuck_client(True), stuck_client(False)]
    idle = socket.create_connection((HOST, PORT))  # keep-alive, between requests
    idle.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    half = socket.create_connection((HOST, PORT))  # halfway through a request
    half.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
    # Both answers made, both writes blocked on clients that do not read (the third request
    # in progress is this /metrics).
    wait_for(lambda m: m["llmrun:generation_tokens_total"] >= 4 * 100 and m["llmrun:num_requests_running"] == 0
             and m["llmrun:http_requests_in_progress"] == 3, "the answers to be made")
    time.sleep(0.5)
    return clients + [idle, half]


def stuck():
    """With --shutdown-timeout 2: SIGTERM exits soon after the deadline though clients do not read."""
    pid = int(sys.argv[3])
    socks = stuck_setup()
    os.kill(pid, signal.SIGTERM)
    # Not before the deadline; soon after it (the clients' --write-timeout is 600 s). The upper
    # bound leaves a loaded machine time to tear down.
    took = wait_exit(pid, 40)
    assert 1.5 <= took <= 20, "exited %.1f s after SIGTERM with a 2 s shutdown deadline" % took
    for s in socks:
        s.close()
    print("stuck: ok (exited %.1f s after SIGTERM)" % took)


def resignal():
    """With a long --shutdown-timeout: a second SIGTERM drops stuck clients at once."""
    pid = int(sys.argv[3])
    socks = stuck_setup()
    os.kill(pid, signal.SIGTERM)
    time.sleep(1)
    with open("/proc/%d/stat" % pid) as f:
        assert f.read().rsplit(")", 1)[1].split()[0] != "Z", "exited before its deadline"
    os.kill(pid, signal.SIGTERM)
    took = wait_exit(pid, 40)  # the deadline is 600 s: 20 s is "at once" on a loaded machine
    assert took <= 20, "exited %.1f s after the second SIGTERM" % took
    for s in socks:
        s.close()
    print("resignal: ok (exited %.1f s after the second SIGTERM)" % took)


{"abuse": abuse, "queue": queue, "drain": drain, "nesting": nesting, "types": types, "http": http_details,
 "stall": stall, "leaks": leaks, "stuck": stuck, "resignal": resignal}[MODE]()
