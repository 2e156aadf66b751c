// Worker Versioning in the workflows (docs/deployment.md "Upgrading workflow code"): every
// execution is pinned to the build it started on (the control worker's default behaviour) and
// moves to the deployment's current build when it continues as new. The long-lived workflows
// (autoscaler, health manager) continue as new soon after a new build becomes current; a training
// run finishes on its build unless it reaches its own continue-as-new first.
import { makeContinueAsNewFunc, workflowInfo, type Workflow } from '@temporalio/workflow';

/** Continue-as-new onto the deployment's current build (the next execution is pinned there). */
export function continueOnCurrentBuild<F extends Workflow>(): (...args: Parameters<F>) => Promise<never> {
  return makeContinueAsNewFunc<F>({ initialVersioningBehavior: 'AUTO_UPGRADE' });
}

/** True once another build than this execution's has become the deployment's current one. */
export function newerBuildIsCurrent(): boolean {
  return workflowInfo().targetWorkerDeploymentVersionChanged === true;
}
