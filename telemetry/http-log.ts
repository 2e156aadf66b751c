// The logging options of Relax's fastify servers (the control API, the OpenAI-compatible endpoint):
// their logger is the process's pino (telemetry/log.ts, RELAX_LOG_LEVEL) under a `component`, and the
// per-request lines fastify writes at info ("incoming request", "request completed") go at debug, so a
// server is quiet by default; a request that fails while its response streams still logs a warning.
import { LogController, type FastifyBaseLogger, type FastifyReply, type FastifyRequest } from 'fastify';
import { componentLog } from './log';

/** fastify's request lines, one level down: debug instead of info. */
class DebugRequestLog extends LogController {
  override incomingRequest(request: FastifyRequest): void {
    request.log.debug({ method: request.method, url: request.url }, 'incoming request');
  }

  override requestCompleted(error: Error | null | undefined, request: FastifyRequest, reply: FastifyReply): void {
    if (error) reply.log.warn({ err: error, method: request.method, url: request.url, status: reply.statusCode }, 'request errored');
    else reply.log.debug({ method: request.method, url: request.url, status: reply.statusCode, ms: Math.round(reply.elapsedTime) }, 'request completed');
  }
}

/** Spread into `Fastify({...})`: the server logs through pino as `component`, its request lines at debug. */
export function fastifyLogging(component: string): { loggerInstance: FastifyBaseLogger; logController: LogController } {
  return { loggerInstance: componentLog(component), logController: new DebugRequestLog() };
}
