#!/usr/bin/env python3
"""The serve playground in headless chromium (tests/e2e/browser_playground.sh starts the
servers): a chat is streamed into the page and equals the server's own greedy answer to the
same request; completion mode likewise; each answer shows tokens/s and time to first token;
a server started with --api-key rejects the page until the key is typed in, and the key is
kept across reloads; the page fetches nothing but its own server. Screenshots are checked
for content.

usage: playground_test.py OPEN_URL KEY_URL KEY SCREENSHOT_DIR"""
import json
import os
import sys
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from webdriver import Browser, Failure, check_screenshot  # noqa: E402

MAX_TOKENS = 32


def post(url, path, body, key=None):
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = "Bearer " + key
    req = urllib.request.Request(url + path, json.dumps(body).encode(), headers)
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


def set_params(b):
    # Greedy, so the page's answer must equal the server's answer to the same request.
    b.js("""const t = document.getElementById('temperature'); t.value = 0; t.dispatchEvent(new Event('input'));
            document.getElementById('max_tokens').value = arguments[0];""", MAX_TOKENS)


def watch_answer(b):
    # Records the length of the newest answer's text at every change while it streams in.
    b.js("""window.lengths = [];
            new MutationObserver(() => {
              const m = document.querySelectorAll('.msg.assistant .content');
              if (m.length) window.lengths.push(m[m.length - 1].textContent.length);
            }).observe(document.getElementById('messages'), {subtree: true, childList: true, characterData: true});""")


def chat(b, url, turns, key=None, system="", text="Hello there"):
    """Sends `text` from the page; `turns` is the conversation so far (the page sends it too)."""
    turns.append({"role": "user", "content": text})
    expected = post(url, "/v1/chat/completions", {
        "messages": ([{"role": "system", "content": system}] if system else []) + turns,
        "temperature": 0, "top_p": 1, "max_tokens": MAX_TOKENS}, key)["choices"][0]["message"]["content"]
    if not expected:
        raise Failure("the model's greedy answer is empty: no text to see streamed")
    turns.append({"role": "assistant", "content": expected})
    b.js("document.getElementById('system').value = arguments[0];", system)
    n = b.js("return document.querySelectorAll('.msg.assistant').length;")
    watch_answer(b)
    b.type("#user-input", text)
    b.click("#send")
    b.wait("the answer to finish", "return document.querySelectorAll('.msg.assistant.done').length > arguments[0];", n)
    got = b.js("const m = document.querySelectorAll('.msg.assistant .content'); return m[m.length - 1].textContent;")
    if got != expected:
        raise Failure(f"chat: the page shows {got!r}, the server answers {expected!r}")
    stats = b.js("const s = document.querySelectorAll('.msg.assistant .stats'); return s[s.length - 1].textContent;")
    if "TTFT" not in stats or "tokens/s" not in stats or f"{MAX_TOKENS} tokens" not in stats:
        raise Failure(f"chat: stats line {stats!r} lacks tokens, TTFT or tokens/s")
    lengths = b.js("return window.lengths;")
    partial = sorted({n for n in lengths if 0 < n < len(expected)})
    return got, stats, partial


def main():
    open_url, key_url, key, shots = sys.argv[1:5]
    with Browser() as b:
        # The screenshot check must fail on an empty page.
        b.get("about:blank")
        try:
            check_screenshot(b.screenshot(os.path.join(shots, "blank.png")), "blank")
            raise Failure("check_screenshot accepted a blank page")
        except Failure as e:
            if "accepted" in str(e):
                raise
        # 1. Chat on an open server: streamed, shown, timed.
        b.get(open_url + "/")
        b.wait("the model name", "return document.getElementById('model-name').textContent.startsWith('model ');")
        set_params(b)
        turns = []
        system = "You are a terse assistant."
        got, stats, partial = chat(b, open_url, turns, system=system)
        print(f"chat answer {got!r} ({stats}); shown partly at lengths {partial}")
        if not partial:  # the page showed the answer growing, not only once it was complete
            raise Failure("chat: the answer appeared all at once, not streamed piece by piece")
        chat(b, open_url, turns, system=system, text="And again")  # the second turn sends the history
        png = b.screenshot(os.path.join(shots, "playground_chat.png"))
        print("playground_chat.png: %d colours, %.2f of rows with content" % check_screenshot(png, "chat"))

        # 2. Completion mode.
        b.click("#mode-completion")
        b.type("#prompt", "The quick brown fox")
        expected = post(open_url, "/v1/completions", {"prompt": "The quick brown fox", "temperature": 0, "top_p": 1,
                                                      "max_tokens": MAX_TOKENS})["choices"][0]["text"]
        b.click("#complete")
        b.wait("the completion", "return document.getElementById('completion-stats').textContent.includes('tokens/s');")
        got = b.text("#completion-text")
        if got != expected:
            raise Failure(f"completion: the page shows {got!r}, the server answers {expected!r}")
        png = b.screenshot(os.path.join(shots, "playground_completion.png"))
        check_screenshot(png, "completion")
        foreign = b.foreign_requests(open_url)
        if foreign:
            raise Failure(f"the page fetched from elsewhere: {foreign}")

        # 3. --api-key: the page is refused until the key is given.
        b.get(key_url + "/")
        b.wait("the key dialog", "return !document.getElementById('api-key-dialog').classList.contains('hidden');")
        if b.text("#model-name") != "API key needed":
            raise Failure(f"key server: header says {b.text('#model-name')!r} without a key")
        png = b.screenshot(os.path.join(shots, "playground_key_dialog.png"))
        check_screenshot(png, "key dialog")
        b.type("#api-key-input", "wrong-key")
        b.click("#api-key-save")
        b.wait("the refusal", "return document.getElementById('api-key-why').textContent.includes('incorrect API key');")
        if "hidden" in b.js("return document.getElementById('api-key-dialog').className;"):
            raise Failure("a wrong key closed the dialog")
        b.type("#api-key-input", key)
        b.click("#api-key-save")
        b.wait("the model name", "return document.getElementById('model-name').textContent.startsWith('model ');")
        b.get(key_url + "/")  # the key is remembered
        b.wait("the model name after a reload",
               "return document.getElementById('model-name').textContent.startsWith('model ');")
        if b.js("return localStorage.getItem('llmrun.apiKey');") != key:
            raise Failure("the key is not in local storage")
        set_params(b)
        got, stats, _ = chat(b, key_url, [], key=key)
        print(f"key server: chat answer {got!r} ({stats})")
        png = b.screenshot(os.path.join(shots, "playground_key_chat.png"))
        check_screenshot(png, "key chat")
        foreign = b.foreign_requests(key_url)
        if foreign:
            raise Failure(f"the page fetched from elsewhere: {foreign}")
    print("playground: ok")


if __name__ == "__main__":
    try:
        main()
    except Failure as e:
        print(f"FAIL: {e}", file=sys.stderr)
        sys.exit(1)
