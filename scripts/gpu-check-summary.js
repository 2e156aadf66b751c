#!/usr/bin/env node
// The one-line JSON verdict of scripts/gpu-check.sh, built from the outputs it captured: the GPU and
// driver (nvidia-smi), the tfjs backend and ONNX Runtime providers (`relax doctor` rows), whether an
// ONNX Runtime CUDA session opens (gpu-check.sh's probe), and the two `relax bench engines --json`
// results (the last stdout line of each, or why there is none).
// `node scripts/gpu-check-summary.js DIR` reads DIR/<name>.out|.err|.rc; buildSummary is pure.
'use strict';
const fs = require('node:fs');
const path = require('node:path');

const CUDA13_MIN_DRIVER = 580;

/** The GPU name and driver of the first line of `nvidia-smi --query-gpu=name,driver_version --format=csv,noheader`. */
function parseNvidiaSmi(text) {
  const lines = (text || '').split('\n').map((l) => l.trim()).filter(Boolean);
  if (!lines.length) return { gpu: null, driver: null, count: 0 };
  const [gpu, driver] = lines[0].split(',').map((s) => s.trim());
  return { gpu: gpu || null, driver: driver || null, count: lines.length };
}

/** A `relax doctor` row (`ok  <name>  <detail>` or `FAIL  <name>  <detail>`), or null when absent. */
function doctorRow(text, name) {
  for (const line of (text || '').split('\n')) {
    const m = /^(ok|FAIL)\s+(.+?)\s{2,}(.*)$/.exec(line);
    if (m && m[2] === name) return { ok: m[1] === 'ok', detail: m[3].trim() };
  }
  return null;
}

/** The providers listed in the onnx runtime row's detail ("..., providers cuda, cpu"), else the row itself. */
function onnxProviders(row) {
  if (!row) return null;
  const m = /providers (.+)$/.exec(row.detail);
  return row.ok && m ? m[1].split(',').map((s) => s.trim()).filter(Boolean) : row;
}

/** The last non-empty stdout line parsed as a JSON object, or undefined. */
function lastJsonObject(stdout) {
  const lines = (stdout || '').split('\n').map((l) => l.trim()).filter(Boolean);
  if (!lines.length) return undefined;
  try {
    const value = JSON.parse(lines[lines.length - 1]);
    return value && typeof value === 'object' && !Array.isArray(value) ? value : undefined;
  } catch {
    return undefined;
  }
}

/** A bench (or probe) run's JSON result, or { error, rc, stderr_tail } when it printed none. */
function benchResult(run) {
  const result = lastJsonObject(run && run.stdout);
  if (result && (!run.rc || run.rc === 0)) return result;
  const tail = (run && run.stderr ? run.stderr : '').trim().split('\n').slice(-5).join('\n');
  return { error: result ? 'exited non-zero after printing a result' : 'no JSON object on the last stdout line', rc: run ? run.rc ?? null : null, stderr_tail: tail, ...(result ? { result } : {}) };
}

/** The summary object; `captured` holds { nvidiaSmi, doctor: {stdout, rc}, setup: {stdout, rc}, onnxProbe, tiny, smollm2 }. */
function buildSummary(captured) {
  const smi = parseNvidiaSmi(captured.nvidiaSmi);
  const doctorText = (captured.doctor && captured.doctor.stdout) || '';
  const tfjs = doctorRow(doctorText, 'tfjs backend');
  const setupLines = ((captured.setup && captured.setup.stdout) || '').split('\n');
  return {
    gpu: smi.gpu,
    driver: smi.driver,
    gpu_count: smi.count,
    // ONNX Runtime's CUDA provider is a CUDA 13 build: CUDA 13 needs a driver of the 580 series or newer.
    driver_cuda13: smi.driver ? Number(smi.driver.split('.')[0]) >= CUDA13_MIN_DRIVER : null,
    tfjs_backend: tfjs ? (tfjs.ok ? tfjs.detail : tfjs) : null,
    onnx_providers: onnxProviders(doctorRow(doctorText, 'onnx runtime')),
    onnx_cuda_session: benchResult(captured.onnxProbe),
    tiny: benchResult(captured.tiny),
    smollm2: benchResult(captured.smollm2),
    setup: {
      rc: captured.setup ? captured.setup.rc ?? null : null,
      cuda: setupLines.filter((l) => /^\[setup\] .*(tfjs-node-gpu|CUDA|\(cuda\))/.test(l)).map((l) => l.slice('[setup] '.length)),
    },
    doctor_rc: captured.doctor ? captured.doctor.rc ?? null : null,
  };
}

/** Reads DIR/<name>.out, .err, .rc as gpu-check.sh leaves them. */
function readCaptured(dir) {
  const read = (file) => {
    try {
      return fs.readFileSync(path.join(dir, file), 'utf8');
    } catch {
      return '';
    }
  };
  const capture = (name) => {
    const rc = read(`${name}.rc`).trim();
    return { stdout: read(`${name}.out`), stderr: read(`${name}.err`), rc: rc === '' ? null : Number(rc) };
  };
  return { nvidiaSmi: read('nvidia-smi.out'), setup: capture('setup'), doctor: capture('doctor'), onnxProbe: capture('onnx_probe'), tiny: capture('tiny'), smollm2: capture('smollm2') };
}

if (require.main === module) {
  if (process.argv.length !== 3) {
    console.error('usage: node scripts/gpu-check-summary.js DIR');
    process.exit(2);
  }
  console.log(JSON.stringify(buildSummary(readCaptured(process.argv[2]))));
}

module.exports = { parseNvidiaSmi, doctorRow, onnxProviders, lastJsonObject, benchResult, buildSummary, readCaptured };
