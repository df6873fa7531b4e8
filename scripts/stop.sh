#!/usr/bin/env bash
# npm run stop: SIGTERM to each app started by scripts/start.sh (and the local GitHub, when it
# started one), then wait for it to exit.
# `--infra` also stops the nats-server and the project-local PostgreSQL that
# scripts/ensure-infra.sh started itself (never a server it found already running).
#
#   GANTRY_STOP_TIMEOUT  seconds to wait for each process after SIGTERM, then SIGKILL (default: the apps'
#                        GANTRY_SHUTDOWN_GRACE_MS, 30 s by default, plus 5 s: an app's stop ends first,
#                        by itself, and a runner's agents are stopped and its claims given back)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/workspace.sh"

grace_ms="${GANTRY_SHUTDOWN_GRACE_MS:-30000}"
[[ "$grace_ms" =~ ^[0-9]+$ ]] || grace_ms=30000
STOP_TIMEOUT="${GANTRY_STOP_TIMEOUT:-$(((grace_ms + 999) / 1000 + 5))}"
STOP_INFRA=0
for arg in "$@"; do
  case "$arg" in
    --infra) STOP_INFRA=1 ;;
    *) die "unknown argument '$arg' (usage: scripts/stop.sh [--infra])" ;;
  esac
done

# The pid in pidfile $1 if that process still runs and its command line contains $2 (a reused
# pid is left alone); removes a stale pidfile.
live_pid() {
  local pidfile="$1" expected="$2" pid
  [[ -f "$pidfile" ]] || return 1
  pid="$(<"$pidfile")"
  if [[ "$pid" =~ ^[0-9]+$ && "$(process_args "$pid")" == *"$expected"* ]]; then
    echo "$pid"
    return 0
  fi
  say "$(basename "$pidfile" .pid) is not running" >&2
  rm -f "$pidfile"
  return 1
}

# SIGTERM to every named process at once, then wait for each; SIGKILL after the timeout.
# Arguments: name=pid ...
terminate() {
  local entry name pid
  for entry in "$@"; do
    say "stopping ${entry%%=*} (pid ${entry#*=}, SIGTERM)"
    kill -TERM "${entry#*=}" 2>/dev/null || true
  done
  local deadline=$((SECONDS + STOP_TIMEOUT))
  for entry in "$@"; do
    name="${entry%%=*}" pid="${entry#*=}"
    while kill -0 "$pid" 2>/dev/null; do
      if ((SECONDS >= deadline)); then
        say "$name did not exit within ${STOP_TIMEOUT}s after SIGTERM; sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        break
      fi
      sleep 0.2
    done
    rm -f "$PID_DIR/$name.pid"
    say "$name stopped"
  done
}

running=()
for app in "${GANTRY_APPS[@]}"; do
  if pid="$(live_pid "$PID_DIR/$app.pid" "apps/$app/dist/main.js")"; then running+=("$app=$pid"); fi
done
if pid="$(live_pid "$PID_DIR/github-fake.pid" tools/github-fake/dist/main.js 2>/dev/null)"; then running+=("github-fake=$pid"); fi
if ((${#running[@]})); then terminate "${running[@]}"; else say "no app started by scripts/start.sh is running"; fi

if ((STOP_INFRA)); then
  # Its data directory on the command line too: after a reboot the pid may belong to a nats-server
  # this checkout did not start (the machine's own), which must be left running.
  if pid="$(live_pid "$PID_DIR/nats-server.pid" "-js -sd $STATE_DIR/nats")"; then terminate "nats-server=$pid"; fi
  if [[ -f "$STATE_DIR/postgres.datadir" ]]; then
    data="$(<"$STATE_DIR/postgres.datadir")"
    if [[ -f "$data/postmaster.pid" ]]; then
      bin="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
      pg_ctl="${bin:+$bin/}pg_ctl"
      say "stopping the project-local PostgreSQL in $data"
      if [[ "$(id -u)" == 0 ]]; then
        runuser -u postgres -- "$pg_ctl" -D "$data" -m fast -w stop
      else
        "$pg_ctl" -D "$data" -m fast -w stop
      fi
    fi
  fi
fi
