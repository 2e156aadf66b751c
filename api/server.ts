// The control API (docs/control-api.md): runs (list, get, start, pause, resume, stop, cancel,
// hyperparameters, metrics) and rollout capacity (Relax's scale-out / scale-in contract, engines),
// over the typed client. fastify with zod schemas; the OpenAPI document is generated from them and
// served at GET /openapi.json, and browsable with Swagger UI at GET /docs. Loopback by default; every mutation needs the bearer token (401
// otherwise); reads do not. Errors are `{ error: { type, message } }` with 400, 401, 404, 409 or 503; a run whose config names
// what is not there (preflight) is a 400 `preflight_failed` with `problems: [{ field, message }]`.
import { HealthConfigError } from '../config/health';
import Fastify, { type FastifyError, type FastifyInstance } from 'fastify';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import { jsonSchemaTransform, serializerCompiler, validatorCompiler, type ZodTypeProvider } from 'fastify-type-provider-zod';
import type { RelaxClient } from '../client';
import { NoCapacityProviderError, ScalingConflictError, UnknownOperationError } from '../client/scaling';
import { AutoscalerConfigError } from '../config/autoscaler';
import { RunConfigError } from '../config/run-config';
import { PreflightError, type PreflightProbes } from '../config/preflight';
import { ApiError } from './errors';
import { registerDashboardRoutes } from './dashboard-routes';
import { registerMetricsRoutes } from './metrics-routes';
import { registerRolloutRoutes } from './rollout-routes';
import { registerRunRoutes } from './run-routes';
import { bearerMatches } from './token';
import { fastifyLogging } from '../telemetry/http-log';

export { ApiError } from './errors';

export interface ControlApiOptions {
  client: RelaxClient;
  token: string;
  /** Default 127.0.0.1. */
  host?: string;
  /** Default 0 (a free port). */
  port?: number;
  version?: string;
  /**
   * The checks of POST /runs before any workflow exists (config/preflight.ts): the task, module
   * files, model.from and data files, as `relax train` checks them. cli/api.ts passes this
   * machine's probes (the API layer may not import envs/ or engines/); absent, runs start unchecked.
   */
  preflight?: PreflightProbes;
}

export interface ControlApi {
  url: string;
  app: FastifyInstance;
  close(): Promise<void>;
}

const READ_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

function errorReply(err: unknown): { status: number; type: string; message: string; problems?: Array<{ field: string; message: string }> } {
  if (err instanceof ApiError) return { status: err.statusCode, type: err.type, message: err.message };
  if (err instanceof RunConfigError) return { status: 400, type: 'invalid_run_config', message: err.message };
  if (err instanceof PreflightError) return { status: 400, type: 'preflight_failed', message: err.message, problems: err.problems };
  if (err instanceof AutoscalerConfigError) return { status: 400, type: 'invalid_autoscaler_config', message: err.message };
  if (err instanceof HealthConfigError) return { status: 400, type: 'invalid_health_config', message: err.message };
  if (err instanceof ScalingConflictError) return { status: 409, type: 'conflict', message: err.message };
  if (err instanceof UnknownOperationError) return { status: 404, type: 'not_found', message: err.message };
  if (err instanceof NoCapacityProviderError) return { status: 503, type: 'no_capacity_provider', message: err.message };
  const e = err as FastifyError;
  if (e.validation || e.code === 'FST_ERR_VALIDATION') return { status: 400, type: 'invalid_request', message: e.message };
  if (typeof e.statusCode === 'number' && e.statusCode >= 400 && e.statusCode < 500) return { status: e.statusCode, type: e.code ?? 'bad_request', message: e.message };
  return { status: 500, type: 'internal', message: (err as Error).message };
}

export async function buildControlApi(opts: ControlApiOptions): Promise<FastifyInstance> {
  const app = Fastify({ ...fastifyLogging('api'), bodyLimit: 1024 * 1024 }).withTypeProvider<ZodTypeProvider>();
  app.setValidatorCompiler(validatorCompiler);
  app.setSerializerCompiler(serializerCompiler);
  await app.register(swagger, {
    openapi: {
      info: { title: 'Relax control API', version: opts.version ?? '0.0.0', description: 'Runs and rollout capacity. Mutations need `Authorization: Bearer <token>`.' },
      components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } } },
    },
    transform: jsonSchemaTransform,
  });
  // Swagger UI at /docs (its document at /docs/json is the same as /openapi.json), read-only: "Try
  // it out" offers GET requests only, and mutations need the bearer token anyway.
  await app.register(swaggerUi, { routePrefix: '/docs', uiConfig: { supportedSubmitMethods: ['get'], deepLinking: true } });

  app.addHook('onRequest', async (request, reply) => {
    if (READ_METHODS.has(request.method)) return;
    if (!bearerMatches(request.headers.authorization, opts.token)) {
      await reply
        .code(401)
        .header('www-authenticate', 'Bearer')
        .send({ error: { type: 'unauthorized', message: 'this request changes state: send Authorization: Bearer <token> (RELAX_API_TOKEN, RELAX_API_TOKEN_FILE or <home>/api-token)' } });
    }
  });
  app.setErrorHandler(async (err, _request, reply) => {
    const { status, ...error } = errorReply(err);
    await reply.code(status).send({ error });
  });
  app.setNotFoundHandler(async (request, reply) => {
    await reply.code(404).send({ error: { type: 'not_found', message: `no route ${request.method} ${request.url.split('?')[0]}: see GET /openapi.json` } });
  });

  app.get('/health', { schema: { tags: ['monitoring'], summary: 'liveness: the API process answers' } }, async () => ({ status: 'ok' }));
  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());
  registerRunRoutes(app, opts.client, opts.preflight);
  registerRolloutRoutes(app, opts.client);
  registerMetricsRoutes(app, opts.client);
  registerDashboardRoutes(app, opts.client);
  return app;
}

export async function startControlApi(opts: ControlApiOptions): Promise<ControlApi> {
  const app = await buildControlApi(opts);
  const host = opts.host ?? '127.0.0.1';
  await app.listen({ host, port: opts.port ?? 0 });
  const address = app.server.address();
  const port = typeof address === 'object' && address ? address.port : opts.port;
  const shownHost = host.includes(':') ? `[${host}]` : host;
  return { url: `http://${shownHost}:${port}`, app, close: () => app.close() };
}
