// The playground's logic: talks to this server's OpenAI endpoints only (same origin), streams
// answers with fetch + a body reader over server-sent events, and measures time to first
// token and tokens/s per answer. The API key (servers started with --api-key) lives in
// localStorage under "llmrun.apiKey".
"use strict";

const KEY_STORE = "llmrun.apiKey";
const $ = (id) => document.getElementById(id);
const turns = [];  // {role, content} of the chat so far
let mode = "chat";
let model = null;
let controller = null;  // aborts the answer in flight

function apiKey() { return localStorage.getItem(KEY_STORE) || ""; }

function headers() {
  const h = { "Content-Type": "application/json" };
  if (apiKey()) h["Authorization"] = "Bearer " + apiKey();
  return h;
}

class AuthError extends Error {}

// Answers 401 by asking for the key; other errors carry the server's message.
async function check(resp) {
  if (resp.ok) return resp;
  let message = resp.status + " " + resp.statusText;
  try {
    const body = await resp.json();
    if (body.error && body.error.message) message = body.error.message;
  } catch (e) { /* not JSON: keep the status line */ }
  if (resp.status === 401) {
    askForKey(apiKey() ? "The key was refused: " + message : "This server was started with --api-key.");
    throw new AuthError(message);
  }
  throw new Error(message);
}

function showError(e) { $("error").textContent = e && !(e instanceof AuthError) ? String(e.message || e) : ""; }

function askForKey(why) {
  $("api-key-why").textContent = why + " The key is kept in this browser's local storage.";
  $("api-key-dialog").classList.remove("hidden");
  $("api-key-input").focus();
}

async function connect() {
  try {
    const resp = await check(await fetch("/v1/models", { headers: headers() }));
    const body = await resp.json();
    model = body.data[0].id;
    $("model-name").textContent = "model " + model + " · context " + body.data[0].max_model_len + " tokens";
    $("api-key-dialog").classList.add("hidden");
    showError(null);
  } catch (e) {
    $("model-name").textContent = e instanceof AuthError ? "API key needed" : "not connected";
    showError(e);
  }
}

function params() {
  const p = {
    model: model || "",
    temperature: Number($("temperature").value),
    top_p: Number($("top_p").value),
    max_tokens: Number($("max_tokens").value) || 128,
    stream: true,
    stream_options: { include_usage: true },
  };
  const k = Number($("top_k").value);
  if (k > 0) p.top_k = k;
  if ($("seed").value !== "") p.seed = Number($("seed").value);
  const stops = $("stop").value.split("\n").filter((s) => s.length > 0);
  if (stops.length) p.stop = stops;
  return p;
}

// Streams one request; onText gets each piece of text. Returns the answer's timing.
async function stream(path, body, onText) {
  controller = new AbortController();
  const t0 = performance.now();
  let tFirst = null, tLast = null, pieces = 0, usage = null;
  const resp = await check(await fetch(path, {
    method: "POST", headers: headers(), body: JSON.stringify(body), signal: controller.signal,
  }));
  const reader = resp.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      for (const line of event.split("\n")) {
        if (!line.startsWith("data: ")) continue;
        const data = line.slice(6);
        if (data === "[DONE]") continue;
        const chunk = JSON.parse(data);
        if (chunk.error) throw new Error(chunk.error.message);
        if (chunk.usage) usage = chunk.usage;
        const c = chunk.choices && chunk.choices[0];
        const text = c ? (c.delta ? c.delta.content : c.text) : null;
        if (text) {
          const now = performance.now();
          if (tFirst === null) tFirst = now;
          tLast = now;
          pieces += 1;
          onText(text);
        }
      }
    }
  }
  const tokens = usage ? usage.completion_tokens : pieces;
  return { ttft: tFirst === null ? null : tFirst - t0, tokens, decodeMs: tFirst === null ? 0 : tLast - tFirst,
           totalMs: performance.now() - t0 };
}

function describe(t) {
  const parts = [t.tokens + " tokens"];
  if (t.ttft !== null) parts.push("TTFT " + t.ttft.toFixed(0) + " ms");
  // Decoding speed: the tokens after the first over the time since the first arrived.
  const rate = t.tokens > 1 && t.decodeMs > 0 ? (t.tokens - 1) / (t.decodeMs / 1000) : t.tokens / (t.totalMs / 1000);
  parts.push(rate.toFixed(1) + " tokens/s");
  return parts.join(" · ");
}

function addMessage(role, text) {
  const div = document.createElement("div");
  div.className = "msg " + role;
  const who = document.createElement("div");
  who.className = "role";
  who.textContent = role;
  const body = document.createElement("pre");
  body.className = "content";
  body.textContent = text;
  div.append(who, body);
  $("messages").append(div);
  return div;
}

function busy(on) {
  $("send").disabled = on;
  $("complete").disabled = on;
  $("stop-gen").disabled = !on;
  $("stop-completion").disabled = !on;
  $("status").textContent = on ? "generating…" : "";
}

async function sendChat() {
  const text = $("user-input").value;
  if (!text.trim() || controller) return;
  $("user-input").value = "";
  showError(null);
  turns.push({ role: "user", content: text });
  addMessage("user", text);
  const div = addMessage("assistant", "");
  const body = div.querySelector(".content");
  const messages = [];
  if ($("system").value.trim()) messages.push({ role: "system", content: $("system").value });
  messages.push(...turns);
  busy(true);
  let answer = "";
  try {
    const t = await stream("/v1/chat/completions", { ...params(), messages }, (piece) => {
      answer += piece;
      body.textContent = answer;
    });
    const stats = document.createElement("div");
    stats.className = "stats";
    stats.textContent = describe(t);
    div.append(stats);
    div.classList.add("done");
    turns.push({ role: "assistant", content: answer });
  } catch (e) {
    if (e.name !== "AbortError") {
      div.remove();
      turns.pop();  // the user's message goes back to the input box to send again
      $("user-input").value = text;
      $("messages").lastChild && $("messages").lastChild.remove();
      showError(e);
    } else {
      turns.push({ role: "assistant", content: answer });
    }
  } finally {
    controller = null;
    busy(false);
  }
}

async function sendCompletion() {
  if (controller) return;
  const prompt = $("prompt").value;
  showError(null);
  $("completion-prompt").textContent = prompt;
  $("completion-text").textContent = "";
  $("completion-stats").textContent = "";
  busy(true);
  try {
    const t = await stream("/v1/completions", { ...params(), prompt }, (piece) => {
      $("completion-text").textContent += piece;
    });
    $("completion-stats").textContent = describe(t);
  } catch (e) {
    if (e.name !== "AbortError") showError(e);
  } finally {
    controller = null;
    busy(false);
  }
}

function setMode(m) {
  mode = m;
  $("mode-chat").classList.toggle("on", m === "chat");
  $("mode-completion").classList.toggle("on", m === "completion");
  $("chat-view").classList.toggle("hidden", m !== "chat");
  $("completion-view").classList.toggle("hidden", m !== "completion");
  $("system-box").classList.toggle("hidden", m !== "chat");
}

$("mode-chat").onclick = () => setMode("chat");
$("mode-completion").onclick = () => setMode("completion");
$("chat-form").onsubmit = (e) => { e.preventDefault(); sendChat(); };
$("user-input").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); sendChat(); }
});
$("complete").onclick = sendCompletion;
$("stop-gen").onclick = $("stop-completion").onclick = () => controller && controller.abort();
$("clear").onclick = () => {
  turns.length = 0;
  $("messages").textContent = "";
  $("completion-prompt").textContent = $("completion-text").textContent = $("completion-stats").textContent = "";
};
for (const id of ["temperature", "top_p"]) {
  $(id).oninput = () => { $(id + "-value").textContent = $(id).value; };
}
$("change-key").onclick = () => askForKey("Enter the server's API key.");
$("api-key-form").onsubmit = (e) => {
  e.preventDefault();
  localStorage.setItem(KEY_STORE, $("api-key-input").value.trim());
  $("api-key-input").value = "";
  connect();
};
connect();
