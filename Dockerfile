# syntax=docker/dockerfile:1
# meterd container image.
#   docker build -t meterd .
#   docker run -p 8080:8080 -v meterd-data:/data meterd
# The first start prints the first admin key once on stdout (`docker logs <container>`).
# See docs/deployment.md for sidecar and gateway set-ups.

ARG NODE_IMAGE=node:20-bookworm-slim

# ---- build: all dependencies, compile TypeScript to dist/ -------------------------------
FROM ${NODE_IMAGE} AS build
WORKDIR /app
# scripts/build.js is npm ci's `prepare`; with no src/ copied yet it does nothing.
COPY package.json package-lock.json ./
COPY scripts ./scripts
RUN npm ci --no-audit --no-fund
COPY tsconfig.json ./
COPY src ./src
# The build also writes the embedded price books, parsed, to dist/config/ (scripts/price-books.js).
COPY config ./config
RUN node scripts/build.js

# ---- deps: production dependencies only (lmdb's native binary comes from its prebuilds) --
FROM ${NODE_IMAGE} AS deps
WORKDIR /app
COPY package.json package-lock.json ./
COPY scripts ./scripts
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force

# ---- runtime -----------------------------------------------------------------------------
FROM ${NODE_IMAGE} AS runtime
ENV NODE_ENV=production \
    METERD_ENDPOINT=0.0.0.0:8080 \
    METERD_DATA_DIR=/data
WORKDIR /app
# package.json marks dist/ as ESM and anchors the package root (config/ is found from it).
COPY package.json ./
COPY --from=deps /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY config ./config
COPY docs/errors.md ./docs/errors.md
COPY proto ./proto
COPY ui ./ui
COPY bin ./bin
# The code stays root-owned (COPY default) and read-only to the daemon; only /data is writable.
RUN mkdir -p /data && chown node:node /data && chmod 0700 /data
VOLUME ["/data"]
USER node
EXPOSE 8080
# No curl in the slim image: ask Node. Follows METERD_ENDPOINT's port if it is overridden.
HEALTHCHECK --interval=15s --timeout=3s --start-period=10s --retries=3 \
  CMD ["node", "-e", "const p=(process.env.METERD_ENDPOINT||'').split(':').pop()||'8080';fetch('http://127.0.0.1:'+p+'/healthz').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"]
ENTRYPOINT ["node", "bin/meterd.js"]
CMD ["run"]
