// Every workflow the control worker hosts. Deterministic code only; activities by type only.
export { smokeWorkflow, smokeProgressQuery } from './smoke';
