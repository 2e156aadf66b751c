# The Relax worker image (CPU). Every role runs from it: `node bin/relax.js worker --role <role>`.
FROM node:20-bookworm-slim
WORKDIR /app
COPY package.json package-lock.json ./
# onnxruntime-node's bundled CPU binaries suffice here; skip its CUDA download.
ENV ONNXRUNTIME_NODE_INSTALL=skip
RUN npm ci --no-audit --no-fund
COPY . .
RUN npx tsc -p tsconfig.json
ENV NODE_ENV=production
CMD ["node", "bin/relax.js", "worker", "--role", "control"]
