// Device selection for accelerator roles: one worker process per device. A CUDA device is pinned
// the way every CUDA program is, through CUDA_VISIBLE_DEVICES, which must be set before any native
// engine (tfjs-node-gpu, onnxruntime's CUDA provider) loads; inside the process the device is then
// always index 0.

export type Device = { kind: 'cpu' } | { kind: 'cuda'; index: number };

const DEVICE_PATTERN = /^(cpu|cuda:(\d{1,3}))$/;

export function parseDevice(text: string): Device {
  const m = DEVICE_PATTERN.exec(text.trim());
  if (!m) {
    throw new Error(`--device: expected "cpu" or "cuda:N" (N a GPU index such as 0), got "${text}"`);
  }
  return m[2] === undefined ? { kind: 'cpu' } : { kind: 'cuda', index: Number(m[2]) };
}

export function deviceLabel(d: Device): string {
  return d.kind === 'cpu' ? 'cpu' : `cuda:${d.index}`;
}

/**
 * Pins this process to `device` by editing the environment native engines read at load time.
 * Returns the variables it set. Call before importing any engine.
 */
export function pinProcessToDevice(device: Device, env: NodeJS.ProcessEnv = process.env): Record<string, string> {
  // An empty list hides every GPU, so a CPU worker cannot grab one by accident.
  const visible = device.kind === 'cuda' ? String(device.index) : '';
  env.CUDA_VISIBLE_DEVICES = visible;
  return { CUDA_VISIBLE_DEVICES: visible };
}
