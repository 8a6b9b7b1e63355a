# Installs the structured-output tests' npm references into the build tree (once): ajv and
# ajv-formats (an independent JSON Schema validator) and the official openai client. Sets
# NPM_DIR. Sourced by serve_structured.sh and serve_structured_trained.sh after common.bash.
AJV_VERSION=8.17.1
AJV_FORMATS_VERSION=3.0.1
OPENAI_VERSION=4.104.0  # as tests/e2e/serve_openai.sh: the 4.x line runs on Debian 12's Node 18
NPM_DIR="$BUILD_DIR/tests/npm-structured"
mkdir -p "$NPM_DIR"
exec 8>"$NPM_DIR/.lock"  # ctest -j may start both tests at once
flock 8
installed=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["version"])' "$NPM_DIR/node_modules/ajv/package.json" 2>/dev/null || true)
if [ "$installed" != "$AJV_VERSION" ] || [ ! -d "$NPM_DIR/node_modules/ajv-formats" ] || [ ! -d "$NPM_DIR/node_modules/openai" ]; then
  command -v npm >/dev/null || fail "npm is required for this test (apt-get install npm)"
  npm install --no-audit --no-fund --prefix "$NPM_DIR" "ajv@$AJV_VERSION" "ajv-formats@$AJV_FORMATS_VERSION" "openai@$OPENAI_VERSION" >"$WORK/npm.log" 2>&1 || { cat "$WORK/npm.log"; fail "npm install ajv failed"; }
fi
flock -u 8
