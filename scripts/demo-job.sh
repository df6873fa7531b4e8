#!/usr/bin/env bash
# npm run demo: after `npm start`, sends one TASK_IMPLEMENTATION job through the running system and
# follows it to its terminal status. The stand-in agent writes and commits a file on a fresh branch
# of the demo origin; the runner verifies it against the job's base_sha and pushes it.
#   behaviour: the stand-in's behaviour (commit, nothing, failing_tests, …), default commit
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/workspace.sh"
cd "$REPO_ROOT"

behaviour="${1:-commit}"
job_service="http://127.0.0.1:${GANTRY_APP_PORTS[job-service]}"
stamp="$(date -u +%Y%m%d%H%M%S)"
branch="gantry/demo-$stamp"

command() { curl -sS -X POST -H 'content-type: application/json' "$job_service/commands/$1" -d "$2"; }

# The demo product: its work lands in the demo origin. Registered once (a repeat under the same key replays).
product="$(command register_product "{\"productId\":\"demo\",\"repository\":\"gantry/demo\",\"cloneUrl\":\"$STATE_DIR/origin/demo.git\",\"targetBranch\":\"main\",\"prStrategy\":\"STORY\",\"mergeMethod\":\"SQUASH\",\"requiredChecks\":[],\"idempotencyKey\":\"demo/register:1\"}")"
node -e 'const r = JSON.parse(process.argv[1]); if (!r.ok && r.error.code !== "INVALID_TRANSITION") { console.error(JSON.stringify(r.error)); process.exit(1); }' "$product"

request=$(cat <<JSON
{
  "kind": "TASK_IMPLEMENTATION",
  "productId": "demo",
  "storyId": "DEMO-1",
  "taskId": "DEMO-1-$stamp",
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
reply="$(command enqueue_job "$request")"
job_id="$(node -e 'const r = JSON.parse(process.argv[1]); if (!r.ok) { console.error(JSON.stringify(r.error)); process.exit(1); } console.log(r.result.jobId ?? r.result.job?.jobId)' "$reply")"
say "enqueued $job_id (branch $branch); following it"

for _ in $(seq 1 120); do
  job="$(command get_job "{\"jobId\":\"$job_id\"}")"
  status="$(node -e 'const r = JSON.parse(process.argv[1]); console.log(r.ok ? r.result.status : "ERROR")' "$job")"
  case "$status" in
    DONE|FAILED|SKIPPED|CANCELLED)
      node -e 'const r = JSON.parse(process.argv[1]).result; console.log(JSON.stringify({ jobId: r.jobId, status: r.status, taskStatus: r.taskStatus, error: r.error, baseSha: r.baseSha, headSha: r.headSha, pushedAt: r.pushedAt, attempt: r.attempt }, null, 2))' "$job"
      if [[ "$status" == DONE ]]; then
        say "the branch on the demo origin:"
        git --git-dir="$STATE_DIR/origin/demo.git" log --oneline -3 "$branch"
      fi
      exit 0
      ;;
  esac
  sleep 0.5
done
die "job $job_id did not finish within a minute (status $status); see .gantry/logs/runner.log"
