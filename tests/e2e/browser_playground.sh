# The `llmrun serve` chat playground at / in Debian's headless chromium (chromedriver):
# streamed chat and completion equal to the server's own answers, speed shown per answer,
# --api-key asked for and remembered, nothing fetched from elsewhere
# (tests/browser/playground_test.py). LLMRUN_SCREENSHOTS=DIR keeps the screenshots.
source "$(dirname "$0")/common.bash"
source "$(dirname "$0")/serve_common.bash"
LLMRUN_PRINTABLE_ONLY=1 "$MAKE_MODEL" "$WORK/tiny" gpt2 4 512 8 512 256 6 chatml
shots=${LLMRUN_SCREENSHOTS:-$WORK}
mkdir -p "$shots"
start_server "$WORK/open.log" "$WORK/tiny" --threads 1
OPEN_PID=$SERVER_PID OPEN_PORT=$PORT
start_server "$WORK/key.log" "$WORK/tiny" --threads 1 --api-key s3cret-key
trap 'kill $OPEN_PID $SERVER_PID 2>/dev/null; rm -rf "$WORK"' EXIT
/usr/bin/python3 "$SRC/tests/browser/playground_test.py" "http://127.0.0.1:$OPEN_PORT" "http://127.0.0.1:$PORT" \
  s3cret-key "$shots" || fail "playground in chromium"
