# Long commands show a progress line on a terminal and nothing when piped: `convert` both ways
# under a pseudo-terminal (util-linux `script`) redraws "reading/writing ... MB (100%)" in
# place; the same commands with stderr redirected print only their summary line.
source "$(dirname "$0")/common.bash"
source "$(dirname "$0")/serve_common.bash"
cd "$WORK"
command -v script >/dev/null || fail "script (util-linux) is required for this test"
"$MAKE_MODEL" hf gpt2 2 64 4 64 256 4
# On a terminal: the line is drawn with carriage returns and ends at 100%.
script -qec "$LLMRUN convert hf --to checkpoint ck" /dev/null > tty1.txt || { cat tty1.txt; fail "convert on a tty"; }
grep -q $'\r\033\\[Kreading hf: .* MB (100%)' tty1.txt || { cat -A tty1.txt; fail "no progress line for convert --to checkpoint"; }
script -qec "$LLMRUN convert ck --to hf hf2" /dev/null > tty2.txt || { cat tty2.txt; fail "convert --to hf on a tty"; }
grep -q $'\r\033\\[Kwriting hf2: .* MB (100%)' tty2.txt || { cat -A tty2.txt; fail "no progress line for convert --to hf"; }
# Piped: the summary only.
rm -rf ck hf2
"$LLMRUN" convert hf --to checkpoint ck 2>piped1.txt | cat
"$LLMRUN" convert ck --to hf hf2 2>piped2.txt | cat
! grep -qE $'reading|writing hf2|\r' piped1.txt piped2.txt || { cat -A piped1.txt piped2.txt; fail "progress printed into a pipe"; }
grep -q "wrote .*hf2" piped2.txt || fail "no summary line: $(cat piped2.txt)"
echo "progress_terminal: ok"
