// Every workflow the control worker hosts. Deterministic code only; activities by type only.
export { smokeWorkflow, smokeProgressQuery } from './smoke';
export { trainingRun, trainingProgressQuery, pauseSignal, resumeSignal, stopSignal } from './training-run';
