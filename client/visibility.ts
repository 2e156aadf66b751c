// How the client reads runs from Temporal visibility: the list query built from the search
// attributes a run sets (RelaxStatus, RelaxTask, ...; workflows/definitions.ts), and one run's
// summary from its execution info (status, search attributes, the memo's progress and summary).
import { defineSearchAttributeKey } from '@temporalio/common';
import type { WorkflowExecutionInfo } from '@temporalio/client';
import type { RunStatus } from '../workflows/run-types';

/** The memo's `progress` (workflows/run-status.ts): refreshed at start, at each evaluation, every 10 steps and at the end. */
export interface MemoProgress {
  status: RunStatus;
  step: number;
  totalSteps: number;
  policyVersion: number;
  lastReward: number | null;
  lastAccuracy: number | null;
  lastEvalStep: number | null;
  etaSeconds: number | null;
  updatedAt: string;
}

/** The memo's `summary`, written when the run ends. */
export interface MemoSummary {
  steps: number;
  policyVersion: number;
  evalAccuracy: number | null;
  skippedSteps?: number;
  status?: RunStatus;
}

/** One run as the workflow list shows it. */
export interface RunSummary {
  /** The run's workflow id (the id every relax command takes). */
  runId: string;
  /** Temporal's id of this execution (changes at continue-as-new). */
  executionRunId: string;
  /** Temporal's execution status: RUNNING, COMPLETED, FAILED, CANCELLED, TERMINATED, TIMED_OUT, CONTINUED_AS_NEW. */
  workflowStatus: string;
  /** The run's own status (RelaxStatus), once the workflow has set it. */
  status?: RunStatus;
  task?: string;
  model?: string;
  step?: number;
  accuracy?: number;
  startTime: Date;
  closeTime?: Date;
  progress?: MemoProgress;
  summary?: MemoSummary;
}

export interface ListOptions {
  /**
   * A run status (RelaxStatus: running, completed, stopped, cancelled, ...) or one Temporal decides:
   * failed, terminated, timed_out.
   */
  status?: string;
  /** The run config's task (RelaxTask). */
  task?: string;
  /** At most this many runs, newest first (default 20). */
  limit?: number;
}

const EXECUTION_STATUSES: Record<string, string> = { failed: 'Failed', terminated: 'Terminated', timed_out: 'TimedOut' };
const RUN_STATUSES: readonly RunStatus[] = ['starting', 'warming_up', 'running', 'paused', 'stopping', 'cancelling', 'completed', 'stopped', 'cancelled', 'continued'];

const StatusKey = defineSearchAttributeKey('RelaxStatus', 'KEYWORD');
const TaskKey = defineSearchAttributeKey('RelaxTask', 'KEYWORD');
const ModelKey = defineSearchAttributeKey('RelaxModel', 'KEYWORD');
const StepKey = defineSearchAttributeKey('RelaxStep', 'INT');
const AccuracyKey = defineSearchAttributeKey('RelaxAccuracy', 'DOUBLE');

function keyword(field: string, value: string): string {
  if (!/^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,199}$/.test(value)) {
    throw new Error(`${field}: ${JSON.stringify(value)} is not a valid value (letters, digits and . _ : @ / - only)`);
  }
  return `'${value}'`;
}

/** The visibility query of `list` (Temporal's SQL-like list filter). */
export function listQuery(o: ListOptions = {}): string {
  const clauses = ["WorkflowType = 'trainingRun'", "ExecutionStatus != 'ContinuedAsNew'"];
  if (o.status !== undefined) {
    const s = o.status.toLowerCase();
    if (EXECUTION_STATUSES[s]) clauses.push(`ExecutionStatus = '${EXECUTION_STATUSES[s]}'`);
    else if ((RUN_STATUSES as readonly string[]).includes(s)) clauses.push(`RelaxStatus = ${keyword('status', s)}`);
    else throw new Error(`status: unknown run status "${o.status}"; use one of ${[...RUN_STATUSES, ...Object.keys(EXECUTION_STATUSES)].join(', ')}`);
  }
  if (o.task !== undefined) clauses.push(`RelaxTask = ${keyword('task', o.task)}`);
  return clauses.join(' AND ');
}

function optional<K extends string, V>(key: K, value: V | undefined | null): { [P in K]?: V } {
  return (value === undefined || value === null ? {} : { [key]: value }) as { [P in K]?: V };
}

export function runSummary(info: Omit<WorkflowExecutionInfo, 'raw'>): RunSummary {
  const attributes = info.typedSearchAttributes;
  const memo = (info.memo ?? {}) as { progress?: MemoProgress; summary?: MemoSummary };
  return {
    runId: info.workflowId,
    executionRunId: info.runId,
    workflowStatus: info.status.name,
    ...optional('status', attributes.get(StatusKey) as RunStatus | undefined),
    ...optional('task', attributes.get(TaskKey)),
    ...optional('model', attributes.get(ModelKey)),
    ...optional('step', attributes.get(StepKey)),
    ...optional('accuracy', attributes.get(AccuracyKey)),
    startTime: info.startTime,
    ...optional('closeTime', info.closeTime),
    ...optional('progress', memo.progress),
    ...optional('summary', memo.summary),
  };
}

/**
 * The run's state as a person reads it: failed / terminated / timed_out when Temporal ended it so
 * (its RelaxStatus then still says where it was), else the run's own status.
 */
export function runState(r: Pick<RunSummary, 'workflowStatus' | 'status' | 'summary'> & { progress?: { status: string } }): string {
  const closedBadly: Record<string, string> = { FAILED: 'failed', TERMINATED: 'terminated', TIMED_OUT: 'timed_out' };
  return closedBadly[r.workflowStatus] ?? r.status ?? r.summary?.status ?? r.progress?.status ?? r.workflowStatus.toLowerCase();
}
