#!/usr/bin/env bash
# npm run bench: builds, then runs every benchmark here and prints its figures.
#   npm run bench -- lifecycle    one of them (by name); see each *.bench.mjs for its settings
set -euo pipefail
cd "$(dirname "$0")/.."
export NX_DAEMON=false NX_NO_CLOUD=true
bash scripts/ensure-infra.sh >/dev/null
npx nx run-many -t build --output-style=static >/dev/null
for bench in bench/*.bench.mjs; do
  if [ -n "${1:-}" ] && [[ "$bench" != *"$1"* ]]; then continue; fi
  echo "== $bench"
  node "$bench"
done
