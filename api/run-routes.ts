// The control API's run routes, over the typed client: list, get, start, pause, resume, stop,
// cancel, hyperparameters (the workflow's setHyperparameters Update), metrics. A run's config is
// validated by the one run-config schema (the client parses it before starting) and preflighted
// when the server has probes (as `relax train`: a missing task, model or data file is a 400 naming
// the field, before any workflow exists); a refused
// hyperparameter update is a 400 with the validator's message and leaves the run untouched.
import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { WorkflowExecutionAlreadyStartedError, WorkflowNotFoundError } from '@temporalio/client';
import type { RelaxClient } from '../client';
import type { HyperparameterUpdate } from '../config/hyperparameters';
import type { RunConfigInput } from '../config/run-config';
import { preflightRunConfig, type PreflightProbes } from '../config/preflight';
import { ApiError } from './errors';

const RunId = z.object({ run_id: z.string().min(1).max(200).describe('the run id (its workflow id)') });
const JsonObject = z.record(z.string(), z.unknown());
const SECURED = [{ bearer: [] }];

/** Maps the client's "no such workflow" to 404 and "already started" to 409. */
async function temporal<T>(runId: string, call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (err) {
    if (err instanceof WorkflowNotFoundError || (err as { name?: string }).name === 'WorkflowNotFoundError') throw new ApiError(404, 'not_found', `no run ${runId}`);
    if (err instanceof WorkflowExecutionAlreadyStartedError) throw new ApiError(409, 'conflict', `run ${runId} already exists: pick another run_id`);
    throw err;
  }
}

export function registerRunRoutes(base: FastifyInstance, client: RelaxClient, preflight?: PreflightProbes): void {
  const app = base.withTypeProvider<ZodTypeProvider>();
  app.get('/runs', {
    schema: {
      tags: ['runs'],
      summary: 'list runs, newest first',
      querystring: z.object({ status: z.string().max(40).optional(), task: z.string().max(200).optional(), limit: z.coerce.number().int().min(1).max(1000).default(20) }),
    },
  }, async (req) => ({ runs: await client.list(req.query) }));

  app.get('/runs/:run_id', { schema: { tags: ['runs'], summary: 'one run: status, progress, memo, failure cause', params: RunId } }, async (req) =>
    temporal(req.params.run_id, () => client.describe(req.params.run_id)),
  );

  app.post('/runs', {
    schema: {
      tags: ['runs'],
      summary: 'start a training run',
      description: 'The body is the run config (one JSON object, docs/configuration.md), e.g. {"recipe":"add2","train":{"steps":100}}. An invalid config is a 400 invalid_run_config; one naming a task, module, model or data file that is not there is a 400 preflight_failed whose problems name each field; neither starts a workflow.',
      body: JsonObject,
      security: SECURED,
    },
  }, async (req, reply) => {
    const config = req.body as RunConfigInput;
    if (preflight) await preflightRunConfig(config, preflight);
    const runId = typeof config.run_id === 'string' ? config.run_id : undefined;
    const handle = await temporal(runId ?? '(new)', () => client.start(config));
    return reply.code(201).send({ run_id: handle.runId });
  });

  for (const action of ['pause', 'resume', 'stop', 'cancel'] as const) {
    const what = { pause: 'pause after the current step', resume: 'resume a paused run', stop: 'finish the current step, publish its version, end', cancel: 'graceful cancel (the run ends CANCELLED; Postgres and the memo say cancelled)' }[action];
    app.post(`/runs/:run_id/${action}`, { schema: { tags: ['runs'], summary: what, params: RunId, security: SECURED } }, async (req, reply) => {
      await temporal(req.params.run_id, () => client[action](req.params.run_id));
      return reply.code(202).send({ run_id: req.params.run_id, requested: action });
    });
  }

  app.post('/runs/:run_id/hyperparameters', {
    schema: {
      tags: ['runs'],
      summary: 'change safe hyperparameters from the next step (the setHyperparameters Update)',
      description: 'e.g. {"train":{"lr":0.0003},"rollout":{"temperature":0.7}}; refused values are a 400 and change nothing.',
      params: RunId,
      body: JsonObject,
      security: SECURED,
    },
  }, async (req) => {
    const runId = req.params.run_id;
    await temporal(runId, () => client.describe(runId));
    try {
      return await client.setHyperparameters(runId, req.body as HyperparameterUpdate);
    } catch (err) {
      throw new ApiError(400, 'invalid_hyperparameters', (err as Error).message);
    }
  });

  registerRunRecordRoutes(base, client);
}

/** A run's records read from Postgres: its events, its stage spans, its metric series. */
function registerRunRecordRoutes(base: FastifyInstance, client: RelaxClient): void {
  const app = base.withTypeProvider<ZodTypeProvider>();
  app.get('/runs/:run_id/events', {
    schema: {
      tags: ['runs'],
      summary: "a run's events (each stage's start and end, worker, attempt), in order; `after` reads only newer ones",
      params: RunId,
      querystring: z.object({ after: z.coerce.number().int().min(0).default(0), limit: z.coerce.number().int().min(1).max(1000).default(200) }),
    },
  }, async (req) => ({ run_id: req.params.run_id, events: await client.events(req.params.run_id, { afterId: req.query.after, limit: req.query.limit }) }));

  app.get('/runs/:run_id/spans', {
    schema: { tags: ['runs'], summary: "a run's newest stage spans (its timeline), oldest first", params: RunId, querystring: z.object({ limit: z.coerce.number().int().min(1).max(2000).default(200) }) },
  }, async (req) => ({ run_id: req.params.run_id, spans: await client.spans(req.params.run_id, { limit: req.query.limit }) }));

  app.get('/runs/:run_id/metrics', {
    schema: {
      tags: ['runs'],
      summary: "a run's metric series from Postgres: name -> [step, value] pairs",
      params: RunId,
      querystring: z.object({ names: z.string().max(2000).optional().describe('comma-separated metric names; default all') }),
    },
  }, async (req) => {
    const names = req.query.names?.split(',').map((n) => n.trim()).filter(Boolean);
    return { run_id: req.params.run_id, metrics: await client.metrics(req.params.run_id, names?.length ? { names } : {}) };
  });
}
