// OpenTelemetry tracing of workflows and activities (docs/monitoring.md#tracing), exported as OTLP
// over HTTP (JSON) when the standard variables name a collector (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
// or OTEL_EXPORTER_OTLP_ENDPOINT), off otherwise: then nothing here is loaded, no SDK starts and no
// interceptor is installed. Workers take their activity interceptors, workflow interceptor module
// and workflow span sink here (workers/worker.ts), the typed client its start-workflow interceptor
// (client/index.ts, through telemetry/client-tracing.ts, which loads this module only when tracing
// is on), so one trace runs from `relax train` through the workflow to every activity.
import type { Tracer } from '@opentelemetry/api';
import type { ExportResult } from '@opentelemetry/core';
import type { Resource } from '@opentelemetry/resources';
import type { ReadableSpan, SpanExporter, SpanProcessor } from '@opentelemetry/sdk-trace-base';
import type { WorkflowClientInterceptor } from '@temporalio/client';
import type { OpenTelemetrySinks } from '@temporalio/interceptors-opentelemetry';
import type { ActivityInterceptorsFactory, InjectedSinks } from '@temporalio/worker';
import type { WorkflowInfo } from '@temporalio/workflow';
import { otlpTracesProtocol, tracingSettings, type TracingSettings } from '../config/environment-services';
import { componentLog } from './log';

const tracingLog = componentLog('tracing');

export { tracingSettings, type TracingSettings } from '../config/environment-services';

/** One process's tracing pipeline (a tracer provider, a batch span processor, the OTLP exporter). */
export interface Tracing {
  settings: TracingSettings;
  /** For WorkerOptions.interceptors.activity: a `RunActivity:<type>` span per activity, a child of the workflow's `StartActivity` span. */
  activityInterceptors: ActivityInterceptorsFactory[];
  /** For the control worker's WorkerOptions.sinks: spans made inside workflows leave the sandbox through them. */
  sinks: InjectedSinks<OpenTelemetrySinks>;
  /** For the client's `interceptors.workflow`: a `StartWorkflow:<type>` span whose context the workflow continues (and signal, update, cancel, terminate spans; not queries or describes). */
  clientInterceptors: WorkflowClientInterceptor[];
  /** Sends what is buffered and stops the pipeline (idempotent; never rejects: a failed send was reported on stderr). */
  shutdown(): Promise<void>;
}

/** The module the workflow bundle must include for workflow spans (bundleWorkflowCode's workflowInterceptorModules). */
export function tracingWorkflowModules(): string[] {
  return [require.resolve('@temporalio/interceptors-opentelemetry/lib/workflow-interceptors')];
}

// The SDK is loaded only when tracing is on.
function loadSdk() {
  return {
    api: require('@opentelemetry/api') as typeof import('@opentelemetry/api'),
    asyncHooks: require('@opentelemetry/context-async-hooks') as typeof import('@opentelemetry/context-async-hooks'),
    core: require('@opentelemetry/core') as typeof import('@opentelemetry/core'),
    exporter: require('@opentelemetry/exporter-trace-otlp-http') as typeof import('@opentelemetry/exporter-trace-otlp-http'),
    resources: require('@opentelemetry/resources') as typeof import('@opentelemetry/resources'),
    sdk: require('@opentelemetry/sdk-trace-base') as typeof import('@opentelemetry/sdk-trace-base'),
    temporal: require('@temporalio/interceptors-opentelemetry') as typeof import('@temporalio/interceptors-opentelemetry'),
  };
}
type Sdk = ReturnType<typeof loadSdk>;

// The interceptors read the active context and propagate it through the global API: while any
// pipeline runs, an AsyncLocalStorage context manager and the W3C trace-context propagator are
// registered, unless the process registered its own (then those serve, and stay). No global tracer
// provider: the interceptors are given this pipeline's tracer.
const globals = { users: 0, context: false, propagation: false };
function acquireGlobals(m: Sdk): void {
  if (globals.users++ > 0) return;
  globals.context = m.api.context.setGlobalContextManager(new m.asyncHooks.AsyncLocalStorageContextManager().enable());
  globals.propagation = m.api.propagation.setGlobalPropagator(new m.core.W3CTraceContextPropagator());
}
function releaseGlobals(m: Sdk): void {
  if (--globals.users > 0) return;
  if (globals.context) m.api.context.disable();
  if (globals.propagation) m.api.propagation.disable();
  globals.context = globals.propagation = false;
}

/** The exporter, saying on stderr when spans could not be sent (the SDK's own log is silent) and when they can again. */
function reportingExporter(inner: SpanExporter, endpoint: string, m: Sdk): SpanExporter {
  let failing = false;
  return {
    export(spans: ReadableSpan[], done: (result: ExportResult) => void) {
      inner.export(spans, (result) => {
        const failed = result.code !== m.core.ExportResultCode.SUCCESS;
        if (failed && !failing) tracingLog.error(`could not send ${spans.length} spans to ${endpoint}: ${result.error?.message ?? 'export failed'} (spans are dropped until it answers)`);
        else if (!failed && failing) tracingLog.warn(`sending spans to ${endpoint} again`);
        failing = failed;
        done(result);
      });
    },
    shutdown: () => inner.shutdown(),
    forceFlush: () => inner.forceFlush?.() ?? Promise.resolve(),
  };
}

/**
 * The client interceptor for the calls that act on a workflow (start, signal, update, cancel,
 * terminate): queries and describes, which `relax watch`, the API and the dashboard poll, would open
 * a trace each.
 */
function clientWrites(otel: WorkflowClientInterceptor): WorkflowClientInterceptor {
  const calls = ['start', 'startWithDetails', 'signal', 'signalWithStart', 'startUpdate', 'startUpdateWithStart', 'terminate', 'cancel'] as const;
  return Object.fromEntries(calls.map((c) => [c, otel[c]!.bind(otel)])) as WorkflowClientInterceptor;
}

/**
 * The workflow span sink. The SDK's copies the whole WorkflowInfo onto every workflow span (memo,
 * search attributes, the SDK's internals, kilobytes each); Relax's spans carry the execution's ids.
 */
function workflowSpanSink(m: Sdk, processor: SpanProcessor, resource: Resource): InjectedSinks<OpenTelemetrySinks> {
  const sink = m.temporal.makeWorkflowExporter(processor, resource);
  const ids = ({ workflowId, runId, workflowType, taskQueue, namespace, attempt }: WorkflowInfo) => ({ workflowId, runId, workflowType, taskQueue, namespace, attempt });
  return { exporter: { export: { ...sink.export, fn: (info, spans) => sink.export.fn(ids(info) as WorkflowInfo, spans) } } };
}

/**
 * Starts this process's tracing when the environment turns it on, else returns undefined (and loads
 * nothing). `role` names the service (`relax-<role>` unless OTEL_SERVICE_NAME) and is the resource's
 * `relax.role`; `identity` (a worker's) is its `service.instance.id`. OTEL_RESOURCE_ATTRIBUTES,
 * OTEL_EXPORTER_OTLP_HEADERS / _TIMEOUT and OTEL_BSP_* apply as in any OTel SDK.
 */
export function startTracing(opts: { role: string; identity?: string }): Tracing | undefined {
  const settings = tracingSettings(opts.role);
  if (!settings) return undefined;
  const protocol = otlpTracesProtocol();
  if (protocol && protocol !== 'http/json') tracingLog.warn(`OTLP protocol ${protocol} is not supported: spans go as http/json to ${settings.endpoint} (the collector's OTLP/HTTP port, 4318 by default, takes it)`);
  const m = loadSdk();
  const own = new m.resources.Resource({ 'service.name': settings.serviceName, 'relax.role': opts.role, ...(opts.identity ? { 'service.instance.id': opts.identity } : {}) });
  const resource = m.resources.Resource.default().merge(own).merge(m.resources.envDetectorSync.detect()) as Resource;
  const exporter = reportingExporter(new m.exporter.OTLPTraceExporter({ url: settings.endpoint }), settings.endpoint, m);
  const processor = new m.sdk.BatchSpanProcessor(exporter);
  const provider = new m.sdk.BasicTracerProvider({ resource, mergeResourceWithDefaults: false, spanProcessors: [processor] });
  const tracer: Tracer = provider.getTracer('relax');
  acquireGlobals(m);
  let stopped: Promise<void> | undefined;
  return {
    settings,
    activityInterceptors: [
      (ctx) => ({
        inbound: new m.temporal.OpenTelemetryActivityInboundInterceptor(ctx, { tracer }),
        outbound: new m.temporal.OpenTelemetryActivityOutboundInterceptor(ctx),
      }),
    ],
    sinks: workflowSpanSink(m, processor, resource),
    clientInterceptors: [clientWrites(new m.temporal.OpenTelemetryWorkflowClientInterceptor({ tracer }))],
    shutdown() {
      stopped ??= provider.shutdown().then(
        () => releaseGlobals(m),
        () => releaseGlobals(m),
      );
      return stopped;
    },
  };
}
