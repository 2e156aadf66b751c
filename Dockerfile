# The Relax image (CPU). Every role runs from it: `node bin/relax.js worker --role <role>`, and the
# control API: `node bin/relax.js api --host 0.0.0.0`. `npm run setup` installs the dependencies
# without their download scripts and builds the native TensorFlow backend against the PyPI
# tensorflow-cpu wheel (docs/architecture.md, Engines); it needs Python 3, a C++ compiler and make,
# which the full node image has.
FROM node:20-bookworm AS build
WORKDIR /app
RUN apt-get update && apt-get install -y --no-install-recommends python3-venv && rm -rf /var/lib/apt/lists/*
COPY . .
RUN npm run setup

FROM node:20-bookworm-slim
WORKDIR /app
COPY --from=build /app /app
ENV NODE_ENV=production
CMD ["node", "bin/relax.js", "worker", "--role", "control"]
