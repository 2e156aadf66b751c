// The shapes the stack's operation workflows show the client through their queries: rollout
// scaling requests and operations (workflows/rollout-scaling.ts), the autoscaler's status and
// decisions (workflows/autoscaler.ts), the health manager's status (workflows/health-manager.ts).
// Types only, with no Temporal workflow import, so the client's declarations (@relax-rl/client)
// carry them without @temporalio/workflow or the activities' code.
import type { HealthAction, HealthReport, LoadedVersion, RolloutObservation } from '../activities/reports';
import type { AutoscalerConfig } from '../config/autoscaler';
import type { HealthConfig } from '../config/health';

export type ScaleOutStatus = 'PENDING' | 'CREATING' | 'HEALTH_CHECKING' | 'WEIGHT_SYNCING' | 'READY' | 'ACTIVE' | 'FAILED' | 'CANCELLED';
export type ScaleInStatus = 'PENDING' | 'DRAINING' | 'REMOVING' | 'COMPLETED' | 'FAILED' | 'CANCELLED';

export interface ScaleOutRequest {
  /** The number of rollout engines wanted (absolute); ignored with `engine_urls`. */
  num_replicas: number;
  /**
   * External OpenAI-compatible engines to add, one engine each (a rollout worker that drives it:
   * rollout/remote-engine.ts); they are added whatever the count already is.
   */
  engine_urls?: string[];
  /** Recorded with the operation; every rollout worker serves every run. */
  model_name?: string;
  /** Per step (create, health check, weight sync); default 300. */
  timeout_secs?: number;
}

export interface ScaleInRequest {
  /** The number of rollout engines to keep (absolute); or name them with `engine_ids`. */
  num_replicas?: number;
  engine_ids?: string[];
  /** Or name external engines by their URL. */
  engine_urls?: string[];
  /** Allow removing engines the stack started with. */
  force?: boolean;
  /** Say what would be removed, remove nothing. */
  dry_run?: boolean;
  /** For draining; default 300. */
  timeout_secs?: number;
}

export interface ScalingOperation {
  kind: 'scale_out' | 'scale_in';
  status: ScaleOutStatus | ScaleInStatus;
  request: ScaleOutRequest | ScaleInRequest;
  fromReplicas?: number;
  targetReplicas?: number;
  /** Engines added (scale-out) or removed (scale-in). */
  engines: string[];
  /** Each state and when it was entered (ISO time). */
  transitions: Array<{ status: string; at: string }>;
  /** What the new engines loaded in WEIGHT_SYNCING, per engine. */
  weights?: Record<string, LoadedVersion[]>;
  dryRun?: boolean;
  message?: string;
}

export interface AutoscalerDecision {
  at: string;
  action: 'scale_out' | 'scale_in' | 'hold';
  /** Engines before and (for scaling) the target. */
  engines: number;
  target?: number;
  reason: string;
  /** What the scaling operation ended as, or why it was not started. */
  outcome?: string;
}

export interface AutoscalerStatus {
  state: 'running' | 'stopped';
  config: AutoscalerConfig;
  lastObservation?: RolloutObservation;
  /** Mean backlog per engine over each sustain window, as last computed. */
  meanBacklogPerEngine?: { scaleOutWindow: number; scaleInWindow: number };
  lastScaleOutAt?: string;
  lastScaleInAt?: string;
  decisions: AutoscalerDecision[];
}

export interface HealthStatus {
  state: 'running' | 'stopped';
  config: HealthConfig;
  lastReport?: HealthReport;
  /** Problems open now, by key ("role:rollout", "run:<id>", ...). */
  open: string[];
  actions: HealthAction[];
}
