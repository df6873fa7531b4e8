#!/usr/bin/env bash
# npm test: install npm packages if needed, make sure NATS and PostgreSQL run, build every project,
# typecheck, lint, and run every project's tests in one Jest run (jest.config.cjs at the root).
# Ends with one plain line `N passed, N failed` (read by CI). Exits non-zero when any step
# failed or when no test ran at all. Extra arguments go to Jest (e.g. `npm test -- contracts`).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/workspace.sh"
cd "$REPO_ROOT"
# Each step's line says how long the run has taken so far, so a slow CI run shows where its time went.
say() { printf '[gantry] %s (at %ds)\n' "$*" "$SECONDS"; }

RESULTS="$STATE_DIR/test-results/jest.json"
failed_steps=()

ensure_node_modules || die "npm ci failed"
bash "$REPO_ROOT/scripts/ensure-infra.sh" || { echo "0 passed, 0 failed"; die "the infrastructure is not ready (see above)"; }

build_all || failed_steps+=(build)

# The typecheck and the lint side by side: tsc uses one core, and together they take about the
# time of the lint alone. Each one's output is shown when both are done.
say "typechecking (tsc -p tsconfig.json --noEmit) and linting (eslint .) side by side"
checks_dir="$(mktemp -d)"
{
  status=0
  npx tsc -p tsconfig.json --noEmit || status=1
  # Projects outside libs/ and apps/ (tools/*) carry their own tsconfig.json.
  for config in tools/*/tsconfig.json; do
    [[ -f "$config" ]] || continue
    npx tsc -p "$config" --noEmit || status=1
  done
  exit "$status"
} >"$checks_dir/typecheck" 2>&1 &
typecheck_pid=$!
npx eslint --max-warnings=0 . >"$checks_dir/lint" 2>&1 &
lint_pid=$!
wait "$typecheck_pid" || failed_steps+=(typecheck)
wait "$lint_pid" || failed_steps+=(lint)
for check in typecheck lint; do
  [[ -s "$checks_dir/$check" ]] && { say "$check said:"; cat "$checks_dir/$check"; }
done
rm -rf "$checks_dir"

# Most test files spend their time waiting — for a service process to start, a lease to expire, a
# consumer to catch up — not computing: a run on 2 cores that other work kept busy (load 8 to 12) took
# as long as a quiet one. So more files run at once than there are cores (GANTRY_TEST_WORKERS).
workers="${GANTRY_TEST_WORKERS:-4}"
say "running every project's tests (jest -c jest.config.cjs, $workers at a time)"
mkdir -p "$(dirname "$RESULTS")"
rm -f "$RESULTS"
node --experimental-vm-modules --no-warnings node_modules/jest/bin/jest.js -c jest.config.cjs \
  --maxWorkers="$workers" --json --outputFile="$RESULTS" "$@"
jest_status=$?
say "the tests ended (jest exit $jest_status)"
((jest_status == 0)) || failed_steps+=(jest)

# Counts from Jest's JSON report; a suite that could not run (syntax error, failing import, a
# throwing beforeAll) counts as one failure, since it has no failed test of its own.
summary="$(node -e '
  const fs = require("node:fs");
  const file = process.argv[1];
  if (!fs.existsSync(file)) { console.log("0 0 0 missing"); process.exit(0); }
  const r = JSON.parse(fs.readFileSync(file, "utf8"));
  const brokenSuites = r.testResults.filter((s) => s.status === "failed" && s.assertionResults.every((a) => a.status !== "failed")).length;
  console.log(r.numPassedTests, r.numFailedTests + brokenSuites, r.numTotalTests, brokenSuites);
' "$RESULTS")"
read -r passed failed total broken <<<"$summary"

if [[ "$broken" == missing ]]; then
  failed_steps+=("jest wrote no report")
elif ((broken > 0)); then
  say "$broken test file(s) failed to run (counted as failures)"
fi
if [[ "$broken" != missing ]] && ((total == 0 && broken == 0)); then
  failed_steps+=("no tests ran")
fi

if ((${#failed_steps[@]})); then
  say "failed: $(IFS=,; echo "${failed_steps[*]}" | sed 's/,/, /g')"
fi
echo "$passed passed, $failed failed"
((${#failed_steps[@]} == 0))
