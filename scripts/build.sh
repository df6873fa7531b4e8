#!/usr/bin/env bash
# npm run build: install npm packages if needed, then build every project with Nx.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/workspace.sh"

ensure_node_modules
build_all
