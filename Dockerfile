# One image recipe for every Gantry app:
#   docker build --build-arg APP=job-service --build-arg PORT=3101 -t gantry/job-service .
# docker-compose.yml builds all five this way.

# ---- build: install every workspace, compile the app and the libraries it depends on ----------
FROM node:20-slim AS build
ARG APP
RUN test -n "$APP" || { echo "build with --build-arg APP=<apps/ directory name>" >&2; exit 1; }
WORKDIR /repo
ENV NX_DAEMON=false \
    NX_NO_CLOUD=true
COPY . .
RUN test -f "apps/$APP/project.json" || { echo "apps/$APP is not an app of this repository" >&2; exit 1; }
RUN npm ci --no-audit --no-fund
RUN npx nx run "$APP:build" --outputStyle=static \
 && test -f "apps/$APP/dist/main.js"
RUN npm prune --omit=dev --no-audit --no-fund

# ---- runtime: compiled app + libraries + production node_modules, as the unprivileged user -----
FROM node:20-slim AS runtime
ARG APP
ARG PORT=3101
# git: the worktree-service and the runner run git against the leased worktrees.
RUN apt-get update \
 && apt-get install -y --no-install-recommends git ca-certificates \
 && rm -rf /var/lib/apt/lists/*
ENV NODE_ENV=production \
    APP=${APP} \
    PORT=${PORT} \
    GANTRY_WORKTREE_ROOT=/var/lib/gantry/worktrees \
    GANTRY_CODE_CACHE_DIR=/var/lib/gantry/code-cache
WORKDIR /app
COPY --from=build /repo/package.json ./package.json
COPY --from=build /repo/node_modules ./node_modules
COPY --from=build /repo/libs ./libs
COPY --from=build /repo/apps/${APP} ./apps/${APP}
# Named volumes mounted here start with this ownership, so the app may write worktrees. The app's code
# stays root's; the code cache of its bundle goes to a directory of its own (docs/operations.md,
# "Starting fast").
RUN mkdir -p /var/lib/gantry/worktrees /var/lib/gantry/code-cache \
 && chown node:node /var/lib/gantry/worktrees /var/lib/gantry/code-cache
USER node
EXPOSE ${PORT}
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
  CMD node -e "fetch('http://127.0.0.1:' + process.env.PORT + '/health').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"
# exec: node replaces the shell, so SIGTERM from `docker stop` reaches the app itself.
CMD exec node apps/${APP}/dist/main.js
