#!/usr/bin/env bash
# npm start: install npm packages if needed, make sure NATS and PostgreSQL run, build, start the
# five apps in the background, wait until each answers GET /ready, and say where to look.
# Running it again while the apps run starts nothing twice. Stop them with `npm run stop`.
#
#   GANTRY_START_TIMEOUT  seconds to wait for all apps to become ready (default 90)
#   GANTRY_SKIP_BUILD=1   start what is already built
#   GANTRY_ONLY_APPS      start only these apps (comma or space separated), e.g. "job-service,runner"
#   GANTRY_GITHUB_TOKEN   (or a GitHub App, see docs/pr-service.md) the pr-service talks to GitHub;
#                         without one it talks to the local GitHub (tools/github-fake), started here
#   GANTRY_GITHUB_FAKE_PORT  the local GitHub's port (default 3110)
#   GANTRY_<APP>_PORT     an app's port, e.g. GANTRY_JOB_SERVICE_PORT (defaults 3101 to 3105)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/workspace.sh"
cd "$REPO_ROOT"

START_TIMEOUT="${GANTRY_START_TIMEOUT:-90}"
# Outside the checkout (the worktree service refuses a root inside a git repository: docs/worktrees.md).
WORKTREE_ROOT="${GANTRY_WORKTREE_ROOT:-${XDG_STATE_HOME:-$HOME/.local/state}/gantry/worktrees}"
DEMO_ORIGIN="$STATE_DIR/origin/demo.git"

# One start at a time per state directory: two at once would each find no app running, start a set
# each and overwrite each other's pid files, leaving apps that `npm run stop` no longer knows about.
# A second start waits for the first and then finds its apps running. The apps, the local GitHub and
# the servers ensure-infra.sh starts must not inherit the lock's descriptor (9>&-), or they would
# hold it for as long as they run.
mkdir -p "$STATE_DIR"
if command -v flock >/dev/null; then
  exec 9>"$STATE_DIR/start.lock"
  if ! flock -n 9; then
    say "another scripts/start.sh is running with $STATE_DIR; waiting for it to finish"
    flock 9
  fi
fi

ensure_node_modules
bash "$REPO_ROOT/scripts/ensure-infra.sh"
if [[ "${GANTRY_SKIP_BUILD:-0}" != 1 ]]; then build_all; fi
mkdir -p "$LOG_DIR" "$PID_DIR" "$WORKTREE_ROOT"

# A local bare repository with one commit, so there is something to lease a worktree of.
if ! git --git-dir="$DEMO_ORIGIN" rev-parse -q --verify refs/heads/main >/dev/null 2>&1; then
  say "creating the demo origin $DEMO_ORIGIN"
  rm -rf "$DEMO_ORIGIN"
  mkdir -p "$(dirname "$DEMO_ORIGIN")"
  git init -q --bare --initial-branch=main "$DEMO_ORIGIN"
  seed="$(mktemp -d)"
  git init -q --initial-branch=main "$seed"
  printf '# demo\n\nA repository for trying Gantry locally.\n' >"$seed/README.md"
  git -C "$seed" add README.md
  git -C "$seed" -c user.name=Gantry -c user.email=gantry@localhost commit -q -m "Initial commit"
  git -C "$seed" push -q "$DEMO_ORIGIN" main
  rm -rf "$seed"
fi

# Without a GitHub token or App, the pr-service opens and merges its PRs on the local GitHub: it hosts
# the demo origin in place (runners push to it as before) and reports a CI check of its own on every
# new PR head, so a local run's PRs go green and merge.
GITHUB_FAKE_PORT="${GANTRY_GITHUB_FAKE_PORT:-3110}"
USE_GITHUB_FAKE=0
if [[ -z "${GANTRY_GITHUB_TOKEN:-}" && -z "${GANTRY_GITHUB_APP_ID:-}" ]]; then USE_GITHUB_FAKE=1; fi
GITHUB_FAKE_SECRET_FILE="$STATE_DIR/github-fake.webhook-secret"

# The pid of an app started by a previous run, if that process still runs this app.
running_pid() {
  local app="$1" pid
  [[ -f "$PID_DIR/$app.pid" ]] || return 1
  pid="$(<"$PID_DIR/$app.pid")"
  [[ "$pid" =~ ^[0-9]+$ && "$(process_args "$pid")" == *"apps/$app/dist/main.js"* ]] || return 1
  echo "$pid"
}

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# HTTP status of GET http://127.0.0.1:<port><path>, or nothing when the port does not answer.
http_status() {
  (
    exec 7<>"/dev/tcp/127.0.0.1/$1" || exit 1
    printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n' "$2" >&7
    IFS=' ' read -r -t 3 _ status _ <&7 || exit 1
    echo "$status"
  ) 2>/dev/null
}

# The last 40 lines this run wrote to an app's log (the log keeps earlier runs above a marker).
show_log_tail() {
  local app="$1" log="$LOG_DIR/$1.log"
  printf '\n----- last lines of %s -----\n' "$log" >&2
  awk '/^=== .* starting / { n = 0 } { lines[n++] = $0 } END { for (i = (n > 40 ? n - 40 : 0); i < n; i++) print lines[i] }' "$log" >&2 || true
  printf -- '-----\n' >&2
}

apps=("${GANTRY_APPS[@]}")
if [[ -n "${GANTRY_ONLY_APPS:-}" ]]; then
  read -r -a apps <<<"${GANTRY_ONLY_APPS//,/ }"
  for app in "${apps[@]}"; do
    [[ -n "${GANTRY_APP_PORTS[$app]:-}" ]] || die "GANTRY_ONLY_APPS names '$app', which is not one of: ${GANTRY_APPS[*]}"
  done
fi

# Check every app before starting any, so a missing build does not leave half a system running.
to_start=()
for app in "${apps[@]}"; do
  port="${GANTRY_APP_PORTS[$app]}"
  if pid="$(running_pid "$app")"; then
    say "$app already runs (pid $pid)"
    continue
  fi
  rm -f "$PID_DIR/$app.pid"
  [[ -f "apps/$app/dist/main.js" ]] || die "apps/$app/dist/main.js does not exist: $app is not built (is apps/$app/src/main.ts written yet?)"
  if port_in_use "$port"; then
    die "port $port is taken by another process; $app cannot start. Stop that process, or start $app on another port: $(app_port_variable "$app")=<port> npm start"
  fi
  to_start+=("$app")
done

if ((USE_GITHUB_FAKE)); then
  if [[ ! -s "$GITHUB_FAKE_SECRET_FILE" ]]; then
    (umask 077 && node -e 'process.stdout.write(require("node:crypto").randomBytes(32).toString("hex"))' >"$GITHUB_FAKE_SECRET_FILE")
  fi
  fake_pid=""
  if [[ -f "$PID_DIR/github-fake.pid" ]]; then
    fake_pid="$(<"$PID_DIR/github-fake.pid")"
    [[ "$fake_pid" =~ ^[0-9]+$ && "$(process_args "$fake_pid")" == *"tools/github-fake/dist/main.js"* ]] || fake_pid=""
  fi
  if [[ -n "$fake_pid" ]]; then
    say "the local GitHub already runs (pid $fake_pid)"
  else
    [[ -f tools/github-fake/dist/main.js ]] || die "tools/github-fake/dist/main.js does not exist: the local GitHub is not built"
    port_in_use "$GITHUB_FAKE_PORT" && die "port $GITHUB_FAKE_PORT is taken; the local GitHub cannot start (set GANTRY_GITHUB_FAKE_PORT, or GANTRY_GITHUB_TOKEN to use GitHub)"
    printf '\n=== %s starting github-fake on port %s ===\n' "$(date -u +%FT%TZ)" "$GITHUB_FAKE_PORT" >>"$LOG_DIR/github-fake.log"
    env GANTRY_GITHUB_FAKE_PORT="$GITHUB_FAKE_PORT" \
      GANTRY_GITHUB_FAKE_DATA_DIR="$STATE_DIR/github-fake" \
      GANTRY_GITHUB_FAKE_WEBHOOK_URL="http://127.0.0.1:${GANTRY_APP_PORTS[pr-service]}/webhooks/github" \
      GANTRY_GITHUB_FAKE_WEBHOOK_SECRET="$(<"$GITHUB_FAKE_SECRET_FILE")" \
      GANTRY_GITHUB_FAKE_REPOSITORIES="gantry/demo=$DEMO_ORIGIN" \
      GANTRY_GITHUB_FAKE_REPOSITORY_SETTINGS='{"allowAutoMerge":true,"requiredChecks":["ci/demo"]}' \
      GANTRY_GITHUB_FAKE_AUTO_CHECKS=ci/demo \
      setsid node tools/github-fake/dist/main.js >>"$LOG_DIR/github-fake.log" 2>&1 </dev/null 9>&- &
    echo $! >"$PID_DIR/github-fake.pid"
    say "started the local GitHub (pid $!, port $GITHUB_FAKE_PORT, log $LOG_DIR/github-fake.log)"
  fi
  deadline=$((SECONDS + START_TIMEOUT))
  until [[ "$(http_status "$GITHUB_FAKE_PORT" /ready)" == 200 ]]; do
    ((SECONDS < deadline)) || die "the local GitHub did not answer on port $GITHUB_FAKE_PORT within ${START_TIMEOUT}s (log: $LOG_DIR/github-fake.log)"
    sleep 0.3
  done
fi

for app in "${to_start[@]}"; do
  port="${GANTRY_APP_PORTS[$app]}"
  app_env=(PORT="$port")
  case "$app" in
    runner)
      app_env+=(
        GANTRY_AGENT_BIN="${GANTRY_AGENT_BIN:-$REPO_ROOT/apps/runner/bin/stand-in-claude}"
        GANTRY_RUNNER_KINDS="${GANTRY_RUNNER_KINDS:-TASK_IMPLEMENTATION,SPRINT_IMPLEMENTATION,IDEA_GRILL,IDEA_MAKE_PLAN,PLAN_CHAT,REVIEW}"
        GANTRY_WORKTREE_ROOT="$WORKTREE_ROOT"
        GANTRY_REPOSITORY_URL="${GANTRY_REPOSITORY_URL:-$DEMO_ORIGIN}"
        GANTRY_RUNNER_ID="${GANTRY_RUNNER_ID:-local-runner-1}"
      )
      ;;
    worktree-service) app_env+=(GANTRY_WORKTREE_ROOT="$WORKTREE_ROOT") ;;
    pr-service)
      if ((USE_GITHUB_FAKE)); then
        app_env+=(
          GANTRY_GITHUB_API_URL="http://127.0.0.1:$GITHUB_FAKE_PORT"
          GANTRY_GITHUB_TOKEN=local-github
          GANTRY_GITHUB_WEBHOOK_SECRETS="$(<"$GITHUB_FAKE_SECRET_FILE")"
          GANTRY_PR_GIT_DIR="$STATE_DIR/pr-service-git"
        )
      fi
      ;;
  esac

  printf '\n=== %s starting %s on port %s ===\n' "$(date -u +%FT%TZ)" "$app" "$port" >>"$LOG_DIR/$app.log"
  # setsid: the app outlives this script and the terminal it was started from.
  env "${app_env[@]}" setsid node "apps/$app/dist/main.js" >>"$LOG_DIR/$app.log" 2>&1 </dev/null 9>&- &
  echo $! >"$PID_DIR/$app.pid"
  say "started $app (pid $!, port $port, log $LOG_DIR/$app.log)"
done

say "waiting up to ${START_TIMEOUT}s for every app to answer GET /ready"
deadline=$((SECONDS + START_TIMEOUT))
for app in "${apps[@]}"; do
  port="${GANTRY_APP_PORTS[$app]}"
  until [[ "$(http_status "$port" /ready)" == 200 ]]; do
    if ! running_pid "$app" >/dev/null; then
      rm -f "$PID_DIR/$app.pid"
      show_log_tail "$app"
      die "$app exited before it became ready (log: $LOG_DIR/$app.log). Apps still running: stop them with 'npm run stop'"
    fi
    if ((SECONDS >= deadline)); then
      show_log_tail "$app"
      die "$app did not answer GET http://127.0.0.1:$port/ready with 200 within ${START_TIMEOUT}s (log: $LOG_DIR/$app.log). Stop everything with 'npm run stop'"
    fi
    sleep 0.5
  done
  say "$app is ready"
done

cat <<EOF

Gantry is running.

  app                url                      liveness, readiness   log
EOF
for app in "${apps[@]}"; do
  port="${GANTRY_APP_PORTS[$app]}"
  printf '  %-18s %-24s %-21s %s\n' "$app" "http://127.0.0.1:$port" "/health, /ready" "${LOG_DIR#"$REPO_ROOT"/}/$app.log"
done
cat <<EOF

  PostgreSQL  $(shown_url "${GANTRY_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/gantry}")
  NATS        $(shown_url "${GANTRY_NATS_URL:-nats://127.0.0.1:4222}") (JetStream)
  worktrees   $WORKTREE_ROOT
  demo origin $DEMO_ORIGIN
  GitHub      $(if ((USE_GITHUB_FAKE)); then echo "the local GitHub, http://127.0.0.1:$GITHUB_FAKE_PORT (no GANTRY_GITHUB_TOKEN; log ${LOG_DIR#"$REPO_ROOT"/}/github-fake.log)"; else echo "${GANTRY_GITHUB_API_URL:-https://api.github.com}"; fi)
  pids        ${PID_DIR#"$REPO_ROOT"/}/

Stop the apps with: npm run stop   (SIGTERM, then waits for each to exit)
EOF
