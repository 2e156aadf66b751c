// The agent endpoint of a rollout worker process: one OpenAI-compatible endpoint
// (serving/openai-server.ts), started the first time a run uses agent rollouts; model "<run_id>" is
// that run's policy engine at whatever version its current generate activity loaded. Agents reach
// it on loopback (rollout/agent-rollout.ts).
import type { PolicyEngine } from '../rollout/policy-engine';
import type { AgentEndpoint } from '../rollout/producers';
import { modelNotFound, startOpenAIServer, type OpenAIServer } from './openai-server';

/** The runs' policy engines this process holds (activities/rollout.ts RunPolicies). */
export interface RunEngines {
  get(runId: string): Promise<PolicyEngine> | undefined;
  runIds(): string[];
}

/** A run's view of this process's one agent endpoint, started on the first call. */
export function agentEndpoints(policies: RunEngines): (runId: string) => Promise<AgentEndpoint> {
  let endpoint: Promise<OpenAIServer> | undefined;
  return async (runId) => {
    endpoint ??= startOpenAIServer({
      resolveModel: async (model) => {
        const policy = await policies.get(model);
        if (!policy) throw modelNotFound(model, 'this rollout worker serves the runs it is generating for, by run id');
        return policy.resolveModel(model, 'current');
      },
      listModels: async () => policies.runIds(),
    });
    const server = await endpoint;
    return { url: server.url, sessions: server.sessions, model: runId };
  };
}
