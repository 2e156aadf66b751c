// Temporal Worker Versioning for the workflow code (docs/deployment.md "Upgrading workflow code"):
// the control worker polls as one build of a worker deployment, its build id derived from the
// workflow bundle it serves, and (by default) makes that build the deployment's current version
// once it polls. New runs start on the current build; a run is pinned to the build it started on
// and finishes there, and moves to the current build only when it continues as new.
import { createHash } from 'node:crypto';
import { backOff } from 'exponential-backoff';
import type { NativeConnection, WorkerDeploymentOptions, WorkflowBundleWithSourceMap } from '@temporalio/worker';
import type { WorkerDeploymentSettings } from '../config/environment';

/** The build id of a workflow bundle: the same code gives the same id on every host. */
export function buildIdOf(bundle: WorkflowBundleWithSourceMap): string {
  return `wf-${createHash('sha256').update(bundle.code).digest('hex').slice(0, 16)}`;
}

/** The control worker's deployment options, or undefined for an unversioned worker. */
export function deploymentOptions(settings: WorkerDeploymentSettings, bundle: WorkflowBundleWithSourceMap): WorkerDeploymentOptions | undefined {
  if (!settings.versioning) return undefined;
  return {
    useWorkerVersioning: true,
    version: { deploymentName: settings.deploymentName, buildId: settings.buildId ?? buildIdOf(bundle) },
    defaultVersioningBehavior: 'PINNED',
  };
}

/**
 * Makes `buildId` the current version of its deployment: new workflow executions start on it.
 * The version exists once the worker has polled, so a "not found" answer is retried for up to
 * `timeoutMs`; any other error is thrown.
 */
export async function promoteBuild(
  connection: NativeConnection,
  target: { namespace: string; deploymentName: string; buildId: string; identity: string },
  timeoutMs = 60_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  // 5 NOT_FOUND: the version is not registered yet (the first poll has not reached the server).
  const notRegisteredYet = (err: unknown) => (err as { code?: number }).code === 5 && Date.now() <= deadline;
  try {
    await backOff(
      () => connection.workflowService.setWorkerDeploymentCurrentVersion({ namespace: target.namespace, deploymentName: target.deploymentName, buildId: target.buildId, identity: target.identity }),
      { startingDelay: 100, maxDelay: 2_000, numOfAttempts: Infinity, retry: notRegisteredYet },
    );
  } catch (err) {
    throw new Error(`could not make build ${target.buildId} the current version of worker deployment ${target.deploymentName}: ${(err as Error).message}\n  fix: check the Temporal server supports worker deployments (1.28 or newer), or set RELAX_WORKER_VERSIONING=off`);
  }
}
