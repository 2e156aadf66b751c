// Tasks by name, as run configs refer to them.
import { add2Task } from './add2';
import type { Task } from './task';

const TASKS: ReadonlyMap<string, Task> = new Map([[add2Task.name, add2Task]]);

export function taskNames(): string[] {
  return [...TASKS.keys()];
}

export function getTask(name: string): Task {
  const task = TASKS.get(name);
  if (!task) throw new Error(`unknown task ${JSON.stringify(name)}: known tasks are ${taskNames().join(', ')}`);
  return task;
}
