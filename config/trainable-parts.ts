// The parts of a policy model a run can train (train.trainable): the language model (with LoRA: its
// adapters), each encoder without its projector, and each projector. engines/model.ts maps every
// parameter to one of them.
export const TRAINABLE_PARTS = ['language_model', 'vision_encoder', 'vision_projector', 'audio_encoder', 'audio_projector'] as const;
export type TrainablePart = (typeof TRAINABLE_PARTS)[number];
