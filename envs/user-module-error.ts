// The error a user module (reward, env, generate or task) that cannot be used raises: what went
// wrong (its code), which module, from which directory. Its own module so the loader
// (envs/user-modules.ts) and the sandbox proxies (envs/sandbox-proxies.ts) share it without a cycle.

export type UserModuleErrorCode = 'not_found' | 'load_failed' | 'missing_export' | 'not_a_function';

/** A user module (reward, env, generate or task) that cannot be used, with a message that says how to fix it. */
export class UserModuleError extends Error {
  constructor(
    message: string,
    readonly code: UserModuleErrorCode,
    readonly module: string,
    readonly cwd: string,
  ) {
    super(message);
    this.name = 'UserModuleError';
  }
}
