// The typed client's tracing (client/index.ts): when the environment turns tracing on
// (docs/monitoring.md#tracing), the start-workflow interceptor of an OpenTelemetry pipeline, else
// nothing. Its types name only @temporalio/client, so the published client (@relax-rl/client)
// declares no OpenTelemetry, worker or workflow types; the pipeline (telemetry/tracing.ts) and the
// OTel SDK it loads are required only when tracing is on (optional peer dependencies of the client
// package, docs/client.md).
import type { WorkflowClientInterceptor } from '@temporalio/client';
import { tracingSettings } from '../config/environment-services';

/** The packages the pipeline loads: optional peer dependencies of @relax-rl/client, dependencies of the root package. */
const OTEL_PACKAGES = ['@opentelemetry/api', '@opentelemetry/context-async-hooks', '@opentelemetry/core', '@opentelemetry/exporter-trace-otlp-http', '@opentelemetry/resources', '@opentelemetry/sdk-trace-base', '@temporalio/interceptors-opentelemetry'];

/** What the client needs of a tracing pipeline. */
export interface ClientTracing {
  /** For the client's `interceptors.workflow`: a `StartWorkflow:<type>` span per start (and signal, update, cancel, terminate). */
  clientInterceptors: WorkflowClientInterceptor[];
  /** Sends what is buffered and stops the pipeline (idempotent; never rejects). */
  shutdown(): Promise<void>;
}

/** The full pipeline (telemetry/tracing.ts), loaded now; a missing OTel package is named with how to install it. */
function startPipeline(role: string): ReturnType<typeof import('./tracing').startTracing> {
  try {
    return (require('./tracing') as typeof import('./tracing')).startTracing({ role });
  } catch (err) {
    if ((err as { code?: string }).code !== 'MODULE_NOT_FOUND') throw err;
    throw new Error(`tracing is on (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set) but its packages are missing (${(err as Error).message.split('\n')[0]}): install ${OTEL_PACKAGES.join(' ')}, or unset the variable`);
  }
}

/** Starts the client's tracing when the environment turns it on (service `relax-<role>`), else returns undefined and loads nothing. */
export function startClientTracing(role: string): ClientTracing | undefined {
  if (!tracingSettings(role)) return undefined;
  const pipeline = startPipeline(role);
  return pipeline && { clientInterceptors: pipeline.clientInterceptors, shutdown: () => pipeline.shutdown() };
}
