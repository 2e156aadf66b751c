// Every workflow the control worker hosts. Deterministic code only; activities by type only.
export { trainingRun, trainingProgressQuery, pauseSignal, resumeSignal, stopSignal } from './training-run';
export { rolloutScaleOut, rolloutScaleIn, scalingOperationQuery } from './rollout-scaling';
export { rolloutAutoscaler, autoscalerStatusQuery, stopAutoscalerSignal } from './autoscaler';
export { healthManager, healthStatusQuery, stopHealthManagerSignal } from './health-manager';
export { evaluateRun } from './evaluate';
