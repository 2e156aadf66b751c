export * from './advantages';
export * from './kl';
export * from './losses';
