// The control API's rollout routes, with Relax's contract: POST /rollout/scale_out
// {model_name?, num_replicas, engine_urls?, timeout_secs?} -> 202 {request_id, status: "PENDING"};
// GET /rollout/scale_out[/{request_id}]; POST /rollout/scale_out/{request_id}/cancel;
// POST /rollout/scale_in {num_replicas | engine_ids, force?, dry_run?, timeout_secs?};
// GET /rollout/scale_in[/{request_id}]; GET /rollout/engines. Each operation is a scaling workflow
// execution (workflows/rollout-scaling.ts); a second one while one runs is a 409.
import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { RelaxClient } from '../client';
import type { ScalingOperationState } from '../client/scaling';
import { ApiError } from './errors';

/** Rollout engines one operation may ask for: a bound on processes started by one request. */
export const MAX_REPLICAS = 64;

const RequestId = z.object({ request_id: z.string().min(1).max(100) });
const SECURED = [{ bearer: [] }];
const timeoutSecs = z.number().int().min(1).max(3600).optional().describe('per step; default 300');

const EngineUrl = z
  .string()
  .max(2000)
  .url()
  .refine((u) => /^https?:\/\/[^/?#]+\/?$/.test(u), 'an engine base URL: http(s)://host:port, no path (the engine serves /v1/...)')
  .transform((u) => u.replace(/\/$/, ''));

const ScaleOutBody = z.object({
  num_replicas: z.number().int().min(1).max(MAX_REPLICAS).optional().describe('the number of rollout engines wanted (absolute: a target already met is a no-op); or give engine_urls'),
  model_name: z.string().max(200).optional().describe('recorded with the operation; every rollout worker serves every run'),
  engine_urls: z.array(EngineUrl).min(1).max(MAX_REPLICAS).optional().describe('external OpenAI-compatible engines to add (`relax serve --engine`), one engine each, driven by a rollout worker of this stack'),
  timeout_secs: timeoutSecs,
}).strict();

const ScaleInBody = z.object({
  num_replicas: z.number().int().min(0).max(MAX_REPLICAS).optional().describe('the number of rollout engines to keep (absolute); LIFO'),
  engine_ids: z.array(z.string().min(1).max(300)).min(1).max(MAX_REPLICAS).optional().describe('the engines to remove, by engine_id (GET /rollout/engines)'),
  engine_urls: z.array(EngineUrl).min(1).max(MAX_REPLICAS).optional().describe('the external engines to remove, by URL'),
  force: z.boolean().optional().describe('allow removing engines the stack started with'),
  dry_run: z.boolean().optional().describe('say what would be removed, remove nothing'),
  timeout_secs: timeoutSecs,
}).strict();

/** An operation in the API's shape (snake_case, as Relax's). */
export function operationBody(op: ScalingOperationState) {
  return {
    request_id: op.requestId,
    kind: op.kind,
    status: op.status,
    execution: op.execution,
    from_replicas: op.fromReplicas ?? null,
    num_replicas: op.targetReplicas ?? null,
    engines: op.engines,
    transitions: op.transitions,
    ...(op.weights ? { weights: op.weights } : {}),
    ...(op.dryRun ? { dry_run: true } : {}),
    ...(op.message ? { message: op.message } : {}),
    request: op.request,
  };
}

export function registerRolloutRoutes(base: FastifyInstance, client: RelaxClient): void {
  const app = base.withTypeProvider<ZodTypeProvider>();
  const rollout = client.rollout;

  app.post('/rollout/scale_out', { schema: { tags: ['rollout'], summary: 'scale rollout out to num_replicas engines', body: ScaleOutBody, security: SECURED } }, async (req, reply) => {
    const { num_replicas, engine_urls, ...rest } = req.body;
    if ((num_replicas === undefined) === (engine_urls === undefined)) {
      throw new ApiError(400, 'invalid_request', 'scale_out: give num_replicas (local rollout workers, absolute) or engine_urls (external engines to add), one of the two');
    }
    if (engine_urls && new Set(engine_urls).size !== engine_urls.length) throw new ApiError(400, 'invalid_request', 'engine_urls: the same URL twice');
    const op = await rollout.scaleOut(engine_urls ? { ...rest, num_replicas: 0, engine_urls } : { ...rest, num_replicas: num_replicas! });
    return reply.code(202).send({ request_id: op.requestId, status: op.status });
  });

  app.post('/rollout/scale_in', { schema: { tags: ['rollout'], summary: 'scale rollout in: drain engines (newest first)', body: ScaleInBody, security: SECURED } }, async (req, reply) => {
    const request = req.body;
    const given = [request.num_replicas !== undefined, request.engine_ids !== undefined, request.engine_urls !== undefined].filter(Boolean).length;
    if (given !== 1) throw new ApiError(400, 'invalid_request', 'scale_in: give one of num_replicas (engines to keep), engine_ids or engine_urls (engines to remove)');
    const op = await rollout.scaleIn(request);
    return reply.code(202).send({ request_id: op.requestId, status: op.status });
  });

  for (const kind of ['scale_out', 'scale_in'] as const) {
    app.get(`/rollout/${kind}`, { schema: { tags: ['rollout'], summary: `${kind} operations, newest first`, querystring: z.object({ limit: z.coerce.number().int().min(1).max(100).default(20) }) } }, async (req) => ({
      operations: (await rollout.list(kind, req.query.limit)).map(operationBody),
    }));
    app.get(`/rollout/${kind}/:request_id`, { schema: { tags: ['rollout'], summary: `one ${kind} operation`, params: RequestId } }, async (req) => operationBody(await rollout.operation(req.params.request_id, kind)));
    app.post(`/rollout/${kind}/:request_id/cancel`, { schema: { tags: ['rollout'], summary: `cancel a running ${kind} (what it started is drained)`, params: RequestId, security: SECURED } }, async (req, reply) => {
      const op = await rollout.cancel(req.params.request_id, kind);
      return reply.code(202).send({ request_id: op.requestId, status: op.status, requested: 'cancel' });
    });
  }

  app.post('/autoscaler', {
    schema: {
      tags: ['autoscaler'],
      summary: 'start the rollout autoscaler (off by default)',
      description: 'Body: {min_engines, max_engines, interval_secs, scale_out: {backlog_per_engine, sustain_secs, step}, scale_in: {...}, cooldown: {scale_out_secs, scale_in_secs}} (docs/control-api.md); 409 if it runs.',
      body: z.record(z.string(), z.unknown()),
      security: SECURED,
    },
  }, async (req, reply) => reply.code(201).send(await rollout.startAutoscaler(req.body)));
  app.post('/autoscaler/stop', { schema: { tags: ['autoscaler'], summary: 'stop the autoscaler', security: SECURED } }, async (_req, reply) => {
    await rollout.stopAutoscaler();
    return reply.code(202).send({ requested: 'stop' });
  });
  app.get('/autoscaler/status', { schema: { tags: ['autoscaler'], summary: 'its config, last observation, window means and cooldown times' } }, async () => {
    const { decisions, ...status } = await rollout.autoscaler();
    return { ...status, last_decision: decisions[decisions.length - 1] ?? null };
  });
  app.get('/autoscaler/history', { schema: { tags: ['autoscaler'], summary: 'its recorded decisions with their reasons, oldest first' } }, async () => ({ decisions: (await rollout.autoscaler()).decisions }));

  app.get('/rollout/engines', { schema: { tags: ['rollout'], summary: 'the rollout engines', querystring: z.object({ include_removed: z.enum(['true', 'false']).default('false') }) } }, async (req) => ({
    engines: (await rollout.engines({ includeRemoved: req.query.include_removed === 'true' })).map((e) => ({
      engine_id: e.engineId,
      kind: e.kind,
      host: e.host,
      pid: e.pid,
      identity: e.identity,
      url: e.url,
      state: e.state,
      initial: e.initial,
      created_at: e.createdAt.toISOString(),
      updated_at: e.updatedAt.toISOString(),
      detail: e.detail,
    })),
  }));
}
