#!/usr/bin/env bash
# The CUDA route checked end to end on a real GPU host with registry access: `npm run setup -- --cuda`,
# `relax doctor --device cuda:0`, and `relax bench engines` on the tiny add2 policy and on
# smollm2-135m-instruct, both on cuda:0. Progress goes to stderr; stdout gets ONE JSON line
# (scripts/gpu-check-summary.js): gpu, driver, tfjs_backend, onnx_providers, onnx_cuda_session,
# tiny, smollm2.
# Doctor rows for temporal/postgres may fail without a running stack; that is expected.
# GPU_CHECK_TIMEOUT (seconds, default 1800) bounds each bench; GPU_CHECK_KEEP=1 keeps the captures.
set -euo pipefail

cd "$(dirname "$0")/.."

fail() {
  echo "gpu-check: $1" >&2
  printf '{"error":"%s"}\n' "$1"
  exit 1
}

command -v nvidia-smi >/dev/null 2>&1 || fail "nvidia-smi not found: this check needs an NVIDIA GPU host"
nvidia-smi >/dev/null 2>&1 || fail "nvidia-smi fails: no usable NVIDIA driver"
command -v node >/dev/null 2>&1 || fail "node not found (need >= 20.19)"
node -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit(a > 20 || (a === 20 && b >= 19) ? 0 : 1)' ||
  fail "node $(node -v) is older than 20.19"
command -v python3 >/dev/null 2>&1 || fail "python3 not found (setup takes the native libraries from PyPI wheels with pip)"

work="$(mktemp -d "${TMPDIR:-/tmp}/relax-gpu-check.XXXXXX")"
if [ "${GPU_CHECK_KEEP:-0}" = "1" ]; then
  echo "gpu-check: captures kept in $work" >&2
else
  trap 'rm -rf "$work"' EXIT
fi
limit="${GPU_CHECK_TIMEOUT:-1800}"

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >"$work/nvidia-smi.out"
cat "$work/nvidia-smi.out" >&2

# capture NAME CMD...: stdout to NAME.out, stderr to NAME.err (also echoed), exit status to NAME.rc.
capture() {
  local name="$1"
  shift
  echo "gpu-check: $*" >&2
  local rc=0
  "$@" >"$work/$name.out" 2>"$work/$name.err" || rc=$?
  echo "$rc" >"$work/$name.rc"
  tail -n 20 "$work/$name.err" >&2 || true
  echo "gpu-check: $name exited $rc" >&2
}

with_timeout() {
  if command -v timeout >/dev/null 2>&1; then timeout "$limit" "$@"; else "$@"; fi
}

# Setup streams its (long) log to stderr as it goes; the summary keeps its CUDA lines.
echo "gpu-check: npm run setup -- --cuda" >&2
set +e
npm run setup -- --cuda 2>&1 | tee "$work/setup.out" >&2
echo "${PIPESTATUS[0]}" >"$work/setup.rc"
set -e

# The doctor's onnx row lists what onnxruntime-node was built for; this probe shows whether a CUDA
# session really opens: the manifest's libraries preloaded, then one Relu on cuda only.
cat >"$work/onnx-probe.js" <<'EOF'
const path = require('node:path');
const { readOnnxCudaManifest, preloadCudaLibraries } = require(path.resolve('dist/engines/cuda-libraries.js'));
const { encodeOnnxModel, OnnxDataType } = require(path.resolve('dist/engines/onnx-proto.js'));
const manifest = readOnnxCudaManifest();
const preload = manifest ? preloadCudaLibraries(manifest) : { loaded: [], failed: [{ file: 'manifest', error: 'none (setup did not install the provider)' }] };
const ort = require(path.resolve('node_modules/onnxruntime-node'));
const v = (name) => ({ name, dataType: OnnxDataType.FLOAT, shape: [2] });
const model = encodeOnnxModel({ name: 'probe', nodes: [{ opType: 'Relu', inputs: ['x'], outputs: ['y'], name: 'relu', attributes: {} }], inputs: [v('x')], outputs: [v('y')] }, 17);
const report = (session, extra = {}) => console.log(JSON.stringify({ session, ...extra, preloaded: preload.loaded.length, preload_failed: preload.failed }));
ort.InferenceSession.create(model, { executionProviders: ['cuda'] })
  .then((s) => s.run({ x: new ort.Tensor('float32', Float32Array.from([-1, 2]), [2]) }))
  .then((out) => report('ok', { y: Array.from(out.y.data) }), (err) => report(String(err.message).split('\n')[0]));
EOF
capture onnx_probe node "$work/onnx-probe.js"
cat "$work/onnx_probe.out" >&2
capture doctor node bin/relax.js doctor --device cuda:0
cat "$work/doctor.out" >&2
capture tiny with_timeout node bin/relax.js bench engines --json --set device=cuda:0
capture smollm2 with_timeout node bin/relax.js bench engines --json --set model=smollm2-135m-instruct --set device=cuda:0

node scripts/gpu-check-summary.js "$work"
