#!/usr/bin/env bash
# Makes sure the infrastructure Gantry needs on this machine is installed, running and answering:
# NATS with JetStream and PostgreSQL with the `gantry` database. Idempotent: when both already
# run it only checks them (it never stops or reconfigures a server it did not start itself).
#
# Configuration (see docs/DEVELOPING.md):
#   GANTRY_DATABASE_URL   default postgres://postgres@127.0.0.1:5432/gantry
#   GANTRY_NATS_URL       default nats://127.0.0.1:4222
#   GANTRY_INFRA_TIMEOUT  seconds to wait for each server to answer (default 60)
#   GANTRY_SKIP_APT=1     never install packages, fail with a hint instead
#   GANTRY_STATE_DIR      where logs, pids and the data of servers started here live (default .gantry)
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STATE_DIR="${GANTRY_STATE_DIR:-$REPO_ROOT/.gantry}"
LOG_DIR="$STATE_DIR/logs"
PID_DIR="$STATE_DIR/pids"
TIMEOUT="${GANTRY_INFRA_TIMEOUT:-60}"

DATABASE_URL="${GANTRY_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/gantry}"
NATS_URL="${GANTRY_NATS_URL:-nats://127.0.0.1:4222}"

say() { printf '[infra] %s\n' "$*"; }
# A URL as it may be shown: its password (scheme://user:password@…) replaced by ***, since what
# this prints ends up in terminals and CI logs (docs/configuration.md: a value may be a secret).
shown_url() {
  if [[ "$1" =~ ^([A-Za-z][A-Za-z0-9+.-]*://[^:@/]*):[^@/]*@(.*)$ ]]; then
    printf '%s:***@%s' "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}"
  else
    printf '%s' "$1"
  fi
}
die() { printf '[infra] ERROR: %s\n' "$*" >&2; exit 1; }

# --- configuration -------------------------------------------------------------------------
# postgres://user[:password]@host[:port]/database[?options]
if [[ "$DATABASE_URL" =~ ^postgres(ql)?://([^:@/]+)(:([^@/]*))?@([^:/?]+)(:([0-9]+))?/([^?]+) ]]; then
  PG_USER="${BASH_REMATCH[2]}"
  PG_PASSWORD="${BASH_REMATCH[4]}"
  PG_HOST="${BASH_REMATCH[5]}"
  PG_PORT="${BASH_REMATCH[7]:-5432}"
  PG_DB="${BASH_REMATCH[8]}"
else
  die "GANTRY_DATABASE_URL must look like postgres://user@host:port/database (got '$(shown_url "$DATABASE_URL")')"
fi
# nats://host[:port] (only the first server of a comma-separated list is checked)
if [[ "${NATS_URL%%,*}" =~ ^(nats|tls)://([^:/]+)(:([0-9]+))?/?$ ]]; then
  NATS_HOST="${BASH_REMATCH[2]}"
  NATS_PORT="${BASH_REMATCH[4]:-4222}"
else
  die "GANTRY_NATS_URL must look like nats://host:port (got '$(shown_url "$NATS_URL")')"
fi
if [[ -n "$PG_PASSWORD" ]]; then export PGPASSWORD="$PG_PASSWORD"; fi

is_local() { [[ "$1" == 127.0.0.1 || "$1" == localhost || "$1" == ::1 ]]; }

# True when something accepts TCP connections on host:port.
listening() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

as_root() {
  if [[ "$(id -u)" == 0 ]]; then "$@"
  elif command -v sudo >/dev/null; then sudo "$@"
  else die "need root to run: $*"
  fi
}

mkdir -p "$LOG_DIR" "$PID_DIR"

# Serialise concurrent callers (start, test and CI may run this at the same time). The servers
# started below must not inherit the lock's descriptor (9>&-), or they would hold it forever.
if command -v flock >/dev/null; then
  exec 9>"$STATE_DIR/ensure-infra.lock"
  flock -w "$TIMEOUT" 9 || die "another ensure-infra.sh holds $STATE_DIR/ensure-infra.lock for more than ${TIMEOUT}s"
fi

# --- installation --------------------------------------------------------------------------
postgres_bin_dir() {
  local dir
  dir="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
  if [[ -n "$dir" && -x "$dir/initdb" ]]; then echo "$dir"; return; fi
  if command -v pg_ctl >/dev/null && command -v initdb >/dev/null; then dirname "$(command -v pg_ctl)"; fi
}

INSTALLED_POSTGRES_NOW=0
missing=()
if is_local "$NATS_HOST" && ! command -v nats-server >/dev/null; then missing+=(nats-server); fi
if ! command -v psql >/dev/null || { is_local "$PG_HOST" && [[ -z "$(postgres_bin_dir)" ]]; }; then missing+=(postgresql); fi
# The lifecycle benchmark (npm run bench -- lifecycle) runs BullMQ against a redis-server it starts
# itself. Nothing else needs it, so where it cannot be installed the system still starts and tests.
if ! command -v redis-server >/dev/null; then
  if [[ "${GANTRY_SKIP_APT:-0}" != 1 ]] && command -v apt-get >/dev/null; then
    missing+=(redis-server)
  else
    say "redis-server is missing (only the lifecycle benchmark needs it: apt-get install -y redis-server)"
  fi
fi
if ((${#missing[@]})); then
  [[ "${GANTRY_SKIP_APT:-0}" == 1 ]] && die "missing ${missing[*]} and GANTRY_SKIP_APT=1; install them with: apt-get install -y ${missing[*]}"
  command -v apt-get >/dev/null || die "missing ${missing[*]} and apt-get is not available; install them with your package manager"
  say "installing ${missing[*]} (apt-get)"
  as_root apt-get update -q
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
  if [[ " ${missing[*]} " == *" postgresql "* ]]; then INSTALLED_POSTGRES_NOW=1; fi
fi

# --- PostgreSQL ----------------------------------------------------------------------------
start_local_postgres() {
  # 1. A Debian cluster on the wanted port (the package creates `<version> main`).
  if command -v pg_lsclusters >/dev/null; then
    local ver name port status
    while read -r ver name port status _; do
      [[ "$port" == "$PG_PORT" ]] || continue
      say "starting the PostgreSQL cluster $ver/$name on port $port (status was: $status)"
      as_root pg_ctlcluster --skip-systemctl-redirect "$ver" "$name" start 9>&- || true
      return
    done < <(pg_lsclusters -h 2>/dev/null || true)
  fi

  # 2. A project-local cluster under .gantry/postgres, owned by the postgres user when we are root.
  local bin data="$STATE_DIR/postgres" owner
  bin="$(postgres_bin_dir)"
  [[ -n "$bin" ]] || die "PostgreSQL server binaries (initdb, pg_ctl) not found"
  owner="$(id -un)"
  run_pg() { "$@"; }
  if [[ "$(id -u)" == 0 ]]; then
    owner=postgres
    run_pg() { runuser -u postgres -- "$@"; }
    mkdir -p "$data"
    chown postgres: "$data"
    chmod 700 "$data"
    if ! runuser -u postgres -- test -w "$data"; then
      data=/var/lib/postgresql/gantry-cluster
      say "the postgres user cannot reach $STATE_DIR; using $data for the project cluster instead"
      mkdir -p "$data" && chown postgres: "$data" && chmod 700 "$data"
    fi
  fi
  if [[ ! -f "$data/PG_VERSION" ]]; then
    say "creating a project-local PostgreSQL cluster in $data (superuser postgres, trust auth on 127.0.0.1)"
    run_pg "$bin/initdb" -D "$data" -U postgres -A trust -E UTF8 >"$LOG_DIR/initdb.log" 2>&1 ||
      { tail -n 20 "$LOG_DIR/initdb.log" >&2; die "initdb failed (log: $LOG_DIR/initdb.log)"; }
  fi
  local log="$LOG_DIR/postgres.log"
  touch "$log"
  if [[ "$owner" != "$(id -un)" ]]; then chown "$owner": "$log"; fi
  say "starting the project-local PostgreSQL on $PG_HOST:$PG_PORT (log: $log)"
  run_pg "$bin/pg_ctl" -D "$data" -l "$log" -w -t "$TIMEOUT" \
    -o "-c listen_addresses=$PG_HOST -p $PG_PORT -k /tmp" start >/dev/null 9>&- ||
    { tail -n 20 "$log" >&2; die "PostgreSQL did not start (log: $log)"; }
  echo "$data" >"$STATE_DIR/postgres.datadir"
}

psql_admin() { psql -h "$PG_HOST" -p "$PG_PORT" -U "$PG_USER" -d postgres -X -q -v ON_ERROR_STOP=1 "$@"; }

# Debian's default pg_hba.conf asks for a password on 127.0.0.1. Only a cluster this script
# installed a moment ago is switched to trust for local TCP; an existing set-up is left alone.
allow_local_trust_on_fresh_debian_cluster() {
  [[ "$INSTALLED_POSTGRES_NOW" == 1 ]] || return 1
  local hba
  hba="$(as_root find /etc/postgresql -name pg_hba.conf 2>/dev/null | sort -V | tail -n 1)"
  [[ -n "$hba" ]] || return 1
  say "trusting local TCP connections in the freshly installed $hba (development set-up)"
  as_root sed -i '1i host all all 127.0.0.1/32 trust # gantry: local development\nhost all all ::1/128 trust # gantry: local development' "$hba"
  as_root runuser -u postgres -- psql -X -q -c 'select pg_reload_conf()' >/dev/null
  INSTALLED_POSTGRES_NOW=0 # once is enough
  sleep 1
}

if ! listening "$PG_HOST" "$PG_PORT"; then
  is_local "$PG_HOST" || die "nothing listens on PostgreSQL $PG_HOST:$PG_PORT and it is not this machine; start it or change GANTRY_DATABASE_URL"
  start_local_postgres
fi

say "waiting for PostgreSQL on $PG_HOST:$PG_PORT"
deadline=$((SECONDS + TIMEOUT))
pg_error=""
until pg_error="$(psql_admin -Atc 'select 1' 2>&1 >/dev/null)"; do
  if [[ "$pg_error" == *"password authentication failed"* || "$pg_error" == *"no password supplied"* ]]; then
    allow_local_trust_on_fresh_debian_cluster && continue
    die "PostgreSQL on $PG_HOST:$PG_PORT refused user '$PG_USER': $pg_error
  Gantry's development default is trust auth for local TCP. Either add to pg_hba.conf
    host all all 127.0.0.1/32 trust
  and reload PostgreSQL, or put a password in GANTRY_DATABASE_URL."
  fi
  ((SECONDS < deadline)) || die "PostgreSQL on $PG_HOST:$PG_PORT did not answer within ${TIMEOUT}s: $pg_error"
  sleep 1
done
say "PostgreSQL answers on $PG_HOST:$PG_PORT"

db_exists() { [[ "$(psql_admin -Atc "select 1 from pg_database where datname = '${PG_DB//\'/\'\'}'")" == 1 ]]; }
if db_exists; then
  say "database '$PG_DB' exists"
else
  # A concurrent caller may create it between the check and the create: re-check on failure.
  psql_admin -c "create database \"${PG_DB//\"/\"\"}\"" 2>/dev/null || db_exists || die "could not create database '$PG_DB'"
  say "created database '$PG_DB'"
fi

# --- NATS JetStream ------------------------------------------------------------------------
started_nats=0
if ! listening "$NATS_HOST" "$NATS_PORT"; then
  started_nats=1
  is_local "$NATS_HOST" || die "nothing listens on NATS $NATS_HOST:$NATS_PORT and it is not this machine; start it or change GANTRY_NATS_URL"
  mkdir -p "$STATE_DIR/nats"
  log="$LOG_DIR/nats-server.log"
  say "starting nats-server with JetStream on $NATS_HOST:$NATS_PORT (data: $STATE_DIR/nats, log: $log)"
  setsid nats-server -a "$NATS_HOST" -p "$NATS_PORT" -js -sd "$STATE_DIR/nats" >>"$log" 2>&1 </dev/null 9>&- &
  echo $! >"$PID_DIR/nats-server.pid"
  disown || true
fi

# The INFO line a NATS server sends to every new connection says whether JetStream is enabled.
nats_info() {
  local line=""
  exec 8<>"/dev/tcp/$NATS_HOST/$NATS_PORT" || return 1
  IFS= read -r -t 2 line <&8 || true
  exec 8>&-
  printf '%s' "$line"
}

say "waiting for NATS on $NATS_HOST:$NATS_PORT"
deadline=$((SECONDS + TIMEOUT))
info=""
until info="$(nats_info 2>/dev/null)" && [[ "$info" == INFO* ]]; do
  # A NATS server sends INFO as it accepts a connection: one that was already there and accepts
  # without it is something else on that port, and waiting out the timeout would not change that.
  if ((!started_nats)) && listening "$NATS_HOST" "$NATS_PORT"; then
    die "something listens on $NATS_HOST:$NATS_PORT but does not answer as a NATS server (no INFO line within 2s); point GANTRY_NATS_URL at NATS's port"
  fi
  ((SECONDS < deadline)) || die "NATS on $NATS_HOST:$NATS_PORT did not answer within ${TIMEOUT}s (log: $LOG_DIR/nats-server.log)"
  sleep 0.5
done
[[ "$info" == *'"jetstream":true'* ]] ||
  die "the NATS server on $NATS_HOST:$NATS_PORT runs without JetStream; restart it with -js (or point GANTRY_NATS_URL at one that has it)"

# With the client packages installed, ask JetStream itself (account info through the JS API).
if [[ -d "$REPO_ROOT/node_modules/@nats-io/jetstream" && -d "$REPO_ROOT/node_modules/@nats-io/transport-node" ]]; then
  deadline=$((SECONDS + TIMEOUT))
  until js_error="$(cd "$REPO_ROOT" && GANTRY_NATS_URL="$NATS_URL" node --input-type=module -e '
      import { connect } from "@nats-io/transport-node";
      import { jetstreamManager } from "@nats-io/jetstream";
      const nc = await connect({ servers: process.env.GANTRY_NATS_URL, timeout: 3000 });
      try { await (await jetstreamManager(nc, { timeout: 3000 })).getAccountInfo(); }
      finally { await nc.close(); }' 2>&1)"; do
    ((SECONDS < deadline)) || die "JetStream on $NATS_HOST:$NATS_PORT did not answer within ${TIMEOUT}s: $js_error"
    sleep 1
  done
fi
say "NATS JetStream answers on $NATS_HOST:$NATS_PORT"
say "infrastructure ready: $(shown_url "$DATABASE_URL"), $(shown_url "$NATS_URL")"
