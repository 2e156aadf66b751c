// The plain data the capacity and weight-sync activities report to the scaling, autoscaler and
// health workflows, which the client reads back through those workflows' queries. Types only,
// importing nothing, so the published client's declarations (@relax-rl/client) stop here instead of
// reaching the activities' code and the engines behind it.

/** What the autoscaler sees at one moment (workflows/autoscaler.ts). */
export interface RolloutObservation {
  at: string;
  /** Rollout tasks waiting for a worker (Temporal's approximate backlog of the rollout queue). */
  backlog: number;
  /** How long the oldest of them has waited, seconds. */
  backlogAgeSecs: number;
  /** Engines the provider runs (not removed). */
  engines: number;
  /** Workers polling the rollout queue (any host). */
  pollers: number;
  /** Share of the window the engines spent generating (stage spans), when any ran. */
  rolloutBusy: number | null;
  /** Share of the window the trainer was not training (waiting for samples), when it trained at all. */
  trainerWait: number | null;
}

/** One role's workers as the health manager sees them. */
export interface RoleHealth {
  role: string;
  /** Worker slots of the role (alive or not). */
  slots: number;
  /** Alive and ready. */
  up: number;
  /** Slots whose process is gone (pid), or is starting again. */
  down: number[];
  /** Ready for over hung_after_secs but not among the queue's pollers (identities). */
  hung: string[];
}

/** What the health manager's check found (workflows/health-manager.ts). */
export interface HealthReport {
  at: string;
  roles: RoleHealth[];
  /** External engines that are active: whether they answer their probe. */
  engines: Array<{ engineId: string; url: string; ok: boolean; problem?: string }>;
  /** Running runs with at least two applied steps: time since the last one, the median step time. */
  runs: Array<{ runId: string; lastStepSecsAgo: number; medianStepSecs: number; stalled: boolean }>;
  disk: { path: string; freeMb: number; low: boolean } | null;
}

/** One thing the health manager did or saw, with why (recorded, and sent to its webhooks). */
export interface HealthAction {
  at: string;
  /** restart_workers, workers_recovered, stop_routing, run_stalled, run_recovered, disk_low */
  action: string;
  /** The role, engine or run it is about. */
  target?: string;
  reason: string;
  detail?: Record<string, unknown>;
}

/** What a weight sync loaded: each running run's newest published version, or why it could not. */
export interface LoadedVersion {
  runId: string;
  policyVersion: number;
  sha256?: string;
  error?: string;
}
