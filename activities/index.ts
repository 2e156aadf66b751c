// The activities a worker of each role registers (on its role queue and on its instance queue).
import type { Role } from '../config/task-queues';
import type { WorkerContext } from './context';
import { createColocatedActivities } from './colocated-step';
import { createControlActivities } from './control';
import { createEvaluateActivities } from './evaluate';
import { createJudgeActivities } from './judge';
import { createNotifyActivities } from './notify';
import { createReferenceActivities } from './reference';
import { createRolloutActivities } from './rollout';
import { createTrainActivities } from './train';

export function activitiesForRole(role: Role, ctx: WorkerContext): object {
  switch (role) {
    case 'control':
      return { ...createControlActivities(ctx), ...createNotifyActivities(ctx) };
    case 'rollout':
      return { ...createRolloutActivities(ctx), ...createEvaluateActivities(ctx) };
    case 'reference':
      return createReferenceActivities(ctx);
    case 'train':
      return { ...createTrainActivities(ctx), ...createColocatedActivities(ctx) };
    case 'judge':
      return createJudgeActivities(ctx);
  }
}
