// The health probe of an external engine (GET /v1/models) and the path of its version-load call
// (served by serving/engine-server.ts, called by rollout/remote-engine.ts), on their own so that
// processes that only watch engines (relax dev's health checks) do not load the inference engine.

/** The version-load call's path. */
export const LOAD_VERSION_PATH = '/v1/relax/load_version';

const describe = (err: unknown) => (err as Error)?.message ?? String(err);

/** Probes an engine (GET /v1/models): undefined when it answers, else why not. */
export async function probeEngine(url: string, timeoutMs = 10_000): Promise<string | undefined> {
  try {
    const res = await fetch(`${url}/v1/models`, { redirect: 'error', signal: AbortSignal.timeout(timeoutMs) });
    await res.body?.cancel().catch(() => undefined);
    return res.ok ? undefined : `GET /v1/models answered HTTP ${res.status}`;
  } catch (err) {
    return `GET /v1/models failed: ${describe(err)}`;
  }
}
