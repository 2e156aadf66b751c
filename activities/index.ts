import type { Role } from '../config/task-queues';
import type { WorkerContext } from './context';
import { createControlActivities } from './control';
import { createReferenceActivities, createReferenceTrainingActivities } from './reference';
import { createRolloutActivities, createRolloutTrainingActivities } from './rollout';
import { createTrainActivities, createTrainingRunActivities } from './train';

/** The activities a worker of `role` registers (on its role queue and on its instance queue). */
export function activitiesForRole(role: Role, ctx: WorkerContext): object {
  switch (role) {
    case 'control':
      return createControlActivities(ctx);
    case 'rollout':
      return { ...createRolloutActivities(ctx), ...createRolloutTrainingActivities(ctx) };
    case 'reference':
      return { ...createReferenceActivities(ctx), ...createReferenceTrainingActivities(ctx) };
    case 'train':
      return { ...createTrainActivities(ctx), ...createTrainingRunActivities(ctx) };
  }
}
