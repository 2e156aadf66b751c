// A failed run's real reason: the cause chain of a Temporal failure (WorkflowFailedError ->
// ActivityFailure -> ApplicationFailure), with each link's type name kept, as one readable message.
// The client throws RunFailedError with it; the CLI prints it.
import { WorkflowFailedError, WorkflowNotFoundError } from '@temporalio/client';
import { ActivityFailure, ApplicationFailure, CancelledFailure, TerminatedFailure, TimeoutFailure } from '@temporalio/common';

/** One link of a cause chain, outermost first. */
export interface FailureLink {
  /** The error's class: WorkflowFailedError, ActivityFailure, ApplicationFailure, CancelledFailure, ... */
  kind: string;
  /** ApplicationFailure's stable type (config/failure-types.ts), or the activity type of an ActivityFailure. */
  type?: string;
  message: string;
}

/** Walks `err.cause` (at most 8 deep), outermost first. */
export function failureChain(err: unknown): FailureLink[] {
  const links: FailureLink[] = [];
  for (let e: unknown = err; e instanceof Error && links.length < 8; e = e.cause) {
    const link: FailureLink = { kind: errorKind(e), message: e.message };
    if (e instanceof ApplicationFailure && e.type) link.type = e.type;
    if (e instanceof ActivityFailure && e.activityType) link.type = e.activityType;
    links.push(link);
  }
  return links;
}

function errorKind(e: Error): string {
  if (e instanceof WorkflowFailedError) return 'WorkflowFailedError';
  if (e instanceof ActivityFailure) return 'ActivityFailure';
  if (e instanceof ApplicationFailure) return 'ApplicationFailure';
  if (e instanceof CancelledFailure) return 'CancelledFailure';
  if (e instanceof TerminatedFailure) return 'TerminatedFailure';
  if (e instanceof TimeoutFailure) return 'TimeoutFailure';
  return e.name || e.constructor?.name || 'Error';
}

/**
 * "Workflow execution failed <- ApplicationFailure(InvalidRunConfig): invalid run config: task: ..."
 * reads outermost to innermost; the innermost link is the real cause.
 */
export function formatFailureChain(links: FailureLink[]): string {
  return links.map((l, i) => (i === 0 && !l.type ? l.message : `${l.kind}${l.type ? `(${l.type})` : ''}: ${l.message}`)).join(' <- ');
}

/** The innermost ApplicationFailure's type (e.g. "UnknownTask"), if the chain has one. */
export function failureType(links: FailureLink[]): string | undefined {
  return [...links].reverse().find((l) => l.kind === 'ApplicationFailure' && l.type)?.type;
}

/** A run ended FAILED, TERMINATED or TIMED_OUT (or CANCELED without a summary); the message is its cause chain. */
export class RunFailedError extends Error {
  override readonly name = 'RunFailedError';
  readonly chain: FailureLink[];
  /** The innermost ApplicationFailure type, when there is one. */
  readonly type?: string;
  constructor(
    readonly runId: string,
    cause: unknown,
  ) {
    const chain = failureChain(cause);
    super(`run ${runId} failed: ${formatFailureChain(chain)}`, { cause });
    this.chain = chain;
    this.type = failureType(chain);
  }
}

/** An Update the workflow's validator refused (the run is untouched); the message names it and says the cause chain once. */
export class UpdateRefusedError extends Error {
  override readonly name = 'UpdateRefusedError';
  constructor(update: string, runId: string, cause: unknown) {
    super(`${update} on ${runId} refused: ${describeError(cause)}`, { cause });
  }
}

/** The message of any error a relax command or client call can raise, cause chain included (once: an error whose message already holds it is said as is). */
export function describeError(err: unknown): string {
  if (err instanceof RunFailedError || err instanceof UpdateRefusedError) return err.message;
  if (err instanceof WorkflowNotFoundError) return `${err.message}: check the run id (relax list)`;
  return formatFailureChain(failureChain(err));
}
