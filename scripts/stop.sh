#!/usr/bin/env bash
# npm run stop: SIGTERM to each app started by scripts/start.sh, then wait for it to exit.
# `--infra` also stops the nats-server and the project-local PostgreSQL that
# scripts/ensure-infra.sh started itself (never a server it found already running).
#
#   GANTRY_STOP_TIMEOUT  seconds to wait for each process after SIGTERM (default 20), then SIGKILL
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/workspace.sh"

STOP_TIMEOUT="${GANTRY_STOP_TIMEOUT:-20}"
STOP_INFRA=0
for arg in "$@"; do
  case "$arg" in
    --infra) STOP_INFRA=1 ;;
    *) die "unknown argument '$arg' (usage: scripts/stop.sh [--infra])" ;;
  esac
done

# Stops the process in pidfile $1 if its command line still contains $2 (a reused pid is left alone).
stop_pidfile() {
  local pidfile="$1" expected="$2" name pid
  name="$(basename "$pidfile" .pid)"
  [[ -f "$pidfile" ]] || return 0
  pid="$(<"$pidfile")"
  if ! [[ "$pid" =~ ^[0-9]+$ ]] || ! ps -p "$pid" -o args= 2>/dev/null | grep -q -- "$expected"; then
    say "$name is not running"
    rm -f "$pidfile"
    return 0
  fi
  say "stopping $name (pid $pid, SIGTERM)"
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + STOP_TIMEOUT))
  while kill -0 "$pid" 2>/dev/null; do
    if ((SECONDS >= deadline)); then
      say "$name did not exit within ${STOP_TIMEOUT}s after SIGTERM; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      break
    fi
    sleep 0.2
  done
  rm -f "$pidfile"
  say "$name stopped"
}

stopped_any=0
for app in "${GANTRY_APPS[@]}"; do
  if [[ -f "$PID_DIR/$app.pid" ]]; then
    stop_pidfile "$PID_DIR/$app.pid" "apps/$app/dist/main.js"
    stopped_any=1
  fi
done
((stopped_any)) || say "no app was started by scripts/start.sh"

if ((STOP_INFRA)); then
  stop_pidfile "$PID_DIR/nats-server.pid" nats-server
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
