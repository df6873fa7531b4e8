#!/usr/bin/env bash
# npm run demo: after `npm start`, sends one TASK_IMPLEMENTATION job of a one-task story through the
# running system and follows it to its end. The stand-in agent writes and commits a file on a fresh
# branch of the demo repository; the runner verifies it against the job's base_sha and pushes it; the
# pr-service opens a pull request for the branch on the local GitHub, waits for its CI check and
# merges it. The script prints the terminal job, the pull request and the merged main branch.
#   behaviour: the stand-in's behaviour (commit, nothing, failing_tests, …), default commit
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/workspace.sh"
cd "$REPO_ROOT"

behaviour="${1:-commit}"
job_service="http://127.0.0.1:${GANTRY_APP_PORTS[job-service]}"
pr_service="http://127.0.0.1:${GANTRY_APP_PORTS[pr-service]}"
github="http://127.0.0.1:${GANTRY_GITHUB_FAKE_PORT:-3110}"
stamp="$(date -u +%Y%m%d%H%M%S)"
branch="gantry/demo-$stamp"

# With GANTRY_HTTP_TOKEN set, the services ask for it on /commands (docs/configuration.md).
command() { curl -sS -X POST -H 'content-type: application/json' ${GANTRY_HTTP_TOKEN:+-H "authorization: Bearer $GANTRY_HTTP_TOKEN"} "$1/commands/$2" -d "$3"; }
field() { node -e "const r = JSON.parse(process.argv[1]); const v = ($2); process.stdout.write(v === undefined || v === null ? '' : String(v))" "$3"; }

# The demo repository as the local GitHub serves it (npm start runs it when no GANTRY_GITHUB_TOKEN is set).
repo_json="$(curl -sS "$github/repos/gantry/demo" 2>/dev/null || true)"
clone_url="$(field "$repo_json" 'r.clone_url' "${repo_json:-{\}}" 2>/dev/null || true)"
[[ -n "$clone_url" ]] || die "the local GitHub does not answer on $github (npm run demo uses it: run 'npm start' without GANTRY_GITHUB_TOKEN)"

# The services it sends to, where npm start put them (GANTRY_<APP>_PORT moves one: export it for both).
for app in job-service pr-service; do
  curl -sS -o /dev/null "http://127.0.0.1:${GANTRY_APP_PORTS[$app]}/ready" 2>/dev/null ||
    die "the $app does not answer on http://127.0.0.1:${GANTRY_APP_PORTS[$app]} (run 'npm start' first; started on another port, set $(app_port_variable "$app") for npm run demo too)"
done

# The demo product: its work lands in gantry/demo, one PR per story, merged when the local GitHub's CI
# check (ci/demo) is green. Registered once; a later run brings its settings up to date.
settings="\"repository\":\"gantry/demo\",\"cloneUrl\":\"$clone_url\",\"targetBranch\":\"main\",\"prStrategy\":\"STORY\",\"mergeMethod\":\"SQUASH\",\"requiredChecks\":[\"ci/demo\"]"
product="$(command "$job_service" register_product "{\"productId\":\"demo\",$settings,\"idempotencyKey\":\"demo/register:$stamp\"}")"
if [[ "$(field "$product" 'r.ok ? "ok" : r.error.code' "$product")" == INVALID_TRANSITION ]]; then
  product="$(command "$job_service" update_product "{\"productId\":\"demo\",\"changes\":{$settings},\"idempotencyKey\":\"demo/update:$stamp\"}")"
fi
[[ "$(field "$product" 'r.ok' "$product")" == true ]] || die "the demo product could not be registered: $product"

request=$(cat <<JSON
{
  "kind": "TASK_IMPLEMENTATION",
  "productId": "demo",
  "storyId": "DEMO-$stamp",
  "taskId": "DEMO-$stamp-1",
  "prompt": "Add a greeting file",
  "baseRef": "main",
  "branch": "$branch",
  "idempotencyKey": "demo/enqueue:$stamp",
  "payload": {
    "standIn": {
      "behaviour": "$behaviour",
      "files": { "greetings/$stamp.txt": "hello from gantry at $stamp\n" },
      "commitMessage": "Add greeting $stamp"
    }
  }
}
JSON
)
reply="$(command "$job_service" enqueue_job "$request")"
job_id="$(node -e 'const r = JSON.parse(process.argv[1]); if (!r.ok) { console.error(JSON.stringify(r.error)); process.exit(1); } console.log(r.result.jobId)' "$reply")"
say "enqueued $job_id (story DEMO-$stamp, branch $branch); following it"

status=""
for _ in $(seq 1 120); do
  job="$(command "$job_service" get_job "{\"jobId\":\"$job_id\"}")"
  status="$(field "$job" 'r.ok ? r.result.status : "ERROR"' "$job")"
  case "$status" in DONE|FAILED|SKIPPED|CANCELLED) break ;; esac
  sleep 0.5
done
node -e 'const r = JSON.parse(process.argv[1]).result; console.log(JSON.stringify({ jobId: r.jobId, status: r.status, taskStatus: r.taskStatus, error: r.error, repository: r.repository, branch: r.branch, baseSha: r.baseSha, headSha: r.headSha, pushedAt: r.pushedAt }, null, 2))' "$job"
case "$status" in
  DONE) ;;
  FAILED)
    say "the job ended FAILED: $(field "$job" 'r.result.error' "$job"); nothing to merge"
    # A FAILED job is a real error in that attempt, not the end of its task (docs/jobs.md, "The finishing rule").
    say "its task stays IN_PROGRESS, by design: the task is neither done nor given up. A FAILED job is not retried;"
    say "a new job for the task (enqueue_job with the same taskId and a new idempotencyKey) takes it up again."
    say "Only a job that finishes DONE or SKIPPED makes the task DONE, and only cancel_job puts it back to TO_DO."
    exit 0 ;;
  SKIPPED|CANCELLED) say "the job ended $status: nothing to merge"; exit 0 ;;
  *) die "job $job_id did not finish within a minute (status $status); see .gantry/logs/runner.log" ;;
esac

say "the pull request of $branch on the local GitHub:"
phase=""
for _ in $(seq 1 180); do
  pr="$(command "$pr_service" get_pull_request "{\"repository\":\"gantry/demo\",\"branch\":\"$branch\"}")"
  phase="$(field "$pr" 'r.ok ? r.result.phase : ""' "$pr")"
  [[ "$phase" == merged || "$phase" == checks_failed || "$phase" == merge_conflict_paused || "$phase" == closed ]] && break
  sleep 0.5
done
node -e 'const r = JSON.parse(process.argv[1]).result; console.log(JSON.stringify({ phase: r.phase, prUrl: r.prUrl, headSha: r.headSha, checks: r.checks, mergeDecision: r.mergeDecision, merged: r.merged }, null, 2))' "$pr"
[[ "$phase" == merged ]] || die "the pull request did not merge within 90 s (phase ${phase:-unknown}); see .gantry/logs/pr-service.log and github-fake.log"
say "merged; main of the demo repository now:"
git --git-dir="$STATE_DIR/origin/demo.git" log --oneline -3 main
