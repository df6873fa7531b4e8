# Shared by start.sh, test.sh and build.sh (sourced, not run): the repository root, the npm
# install check and the build of every project.

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STATE_DIR="${GANTRY_STATE_DIR:-$REPO_ROOT/.gantry}"
LOG_DIR="$STATE_DIR/logs"
PID_DIR="$STATE_DIR/pids"

# Nx without its daemon or cloud: one short-lived process, nothing leaves the machine.
export NX_DAEMON=false NX_NO_CLOUD=true

# The five apps and their default HTTP ports (README, "The scripts": GANTRY_<APP>_PORT moves one).
GANTRY_APPS=(job-service workflow-engine pr-service worktree-service runner)
declare -A GANTRY_APP_PORTS=(
  [job-service]=3101 [workflow-engine]=3102 [pr-service]=3103 [worktree-service]=3104 [runner]=3105
)

say() { printf '[gantry] %s\n' "$*"; }
die() { printf '[gantry] ERROR: %s\n' "$*" >&2; exit 1; }

# The variable that moves an app off its default port: job-service -> GANTRY_JOB_SERVICE_PORT.
app_port_variable() { local name="${1^^}"; printf 'GANTRY_%s_PORT' "${name//-/_}"; }

# Each app's port, moved by its variable (e.g. when another program holds the default):
# GANTRY_JOB_SERVICE_PORT, GANTRY_WORKFLOW_ENGINE_PORT, GANTRY_PR_SERVICE_PORT, GANTRY_WORKTREE_SERVICE_PORT, GANTRY_RUNNER_PORT.
for _app in "${GANTRY_APPS[@]}"; do
  _variable="$(app_port_variable "$_app")"
  _port="${!_variable:-}"
  [[ -z "${_port//[[:space:]]/}" ]] && continue
  [[ "$_port" =~ ^[0-9]+$ ]] && ((10#$_port >= 1 && 10#$_port <= 65535)) || die "$_variable must be a port number (1 – 65535)"
  GANTRY_APP_PORTS[$_app]=$((10#$_port))
done
unset _app _variable _port

# A URL as it may be shown: its password (scheme://user:password@…) replaced by *** (the same as
# ensure-infra.sh's; docs/configuration.md: a value may be a secret).
shown_url() {
  if [[ "$1" =~ ^([A-Za-z][A-Za-z0-9+.-]*://[^:@/]*):[^@/]*@(.*)$ ]]; then
    printf '%s:***@%s' "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}"
  else
    printf '%s' "$1"
  fi
}

# The command line of a running process (empty when it does not run); /proc first, since
# minimal images have no ps.
process_args() {
  if [[ -r "/proc/$1/cmdline" ]]; then tr '\0' ' ' <"/proc/$1/cmdline"
  else ps -p "$1" -o args= 2>/dev/null || true
  fi
}

require_node() {
  command -v node >/dev/null || die "Node.js 20.19 or newer is required (node is not on PATH)"
  node -e '
    const [major, minor] = process.versions.node.split(".").map(Number);
    process.exit(major > 20 || (major === 20 && minor >= 19) ? 0 : 1);' ||
    die "Node.js 20.19 or newer is required (found $(node --version))"
}

# npm ci when node_modules is missing or older than package-lock.json. A registry that drops a
# connection mid-download (ECONNRESET) fails npm ci outright, and npm's own fetch retries do not
# cover a body cut short: it is run again, three tries in all, 10 s and then 20 s apart (npm ci
# starts from an empty node_modules each time). A lasting failure still fails, after the third.
ensure_node_modules() {
  require_node
  local marker="$REPO_ROOT/node_modules/.package-lock.json"
  if [[ ! -f "$marker" ]]; then
    say "installing npm packages (npm ci): node_modules is missing"
  elif [[ "$REPO_ROOT/package-lock.json" -nt "$marker" ]]; then
    say "installing npm packages (npm ci): package-lock.json is newer than node_modules"
  else
    return 0
  fi
  local attempt
  for attempt in 1 2 3; do
    (cd "$REPO_ROOT" && npm ci --no-audit --no-fund) && return 0
    if ((attempt < 3)); then
      say "npm ci failed (try $attempt of 3); trying again in $((attempt * 10)) s"
      sleep $((attempt * 10))
    fi
  done
  return 1
}

build_all() {
  say "building every project (nx run-many -t build)"
  (cd "$REPO_ROOT" && npx nx run-many -t build --outputStyle=static)
}
