# Sourced by the command-line tests that check refusals (tests/cli/*.sh, tests/bench/*.sh): a
# temporary folder $tmp removed on exit, fail MESSAGE, and expect_error PATTERN CMD...: CMD must
# exit non-zero within EXPECT_ERROR_TIMEOUT seconds (default 20), without crashing or hanging
# (status 124 and above), and print PATTERN (a grep pattern) on stdout or stderr.
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
expect_error() {
  local want=$1; shift; local rc=0
  timeout "${EXPECT_ERROR_TIMEOUT:-20}" "$@" > "$tmp/out" 2>&1 || rc=$?
  [ "$rc" != 0 ] || fail "expected an error from: $*"
  [ "$rc" -lt 124 ] || fail "'$*' crashed or hung (status $rc): $(tail -n 2 "$tmp/out")"
  grep -q -- "$want" "$tmp/out" || fail "error for '$*' should mention '$want': $(cat "$tmp/out")"
}
