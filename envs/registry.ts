// Tasks by name, as run configs refer to them.
import { add2Task } from './add2';
import { calculatorTask } from './calculator';
import { gridworldTask } from './gridworld';
import { guessNumberTask } from './guess-number';
import { OMNI_TASKS } from './omni-tasks';
import { zoomTask } from './zoom';
import { isTaskModule, loadTaskModule } from './task-modules';
import type { Task } from './task';

const TASKS: ReadonlyMap<string, Task> = new Map([add2Task, calculatorTask, guessNumberTask, gridworldTask, ...OMNI_TASKS, zoomTask].map((t) => [t.name, t]));

export function taskNames(): string[] {
  return [...TASKS.keys()];
}

export function getTask(name: string): Task {
  const task = TASKS.get(name);
  if (!task) throw new Error(`unknown task ${JSON.stringify(name)}: known tasks are ${taskNames().join(', ')}`);
  return task;
}

/** A built-in task by name, or a task module by path (envs/task-modules.ts). */
export async function loadTask(name: string): Promise<Task> {
  if (TASKS.has(name) || !isTaskModule(name)) return getTask(name);
  return loadTaskModule(name);
}
