// The `ms` package's types for this CommonJS build: its own index.d.ts sits in a "type": "module"
// package, which node16 resolution refuses to a CommonJS importer although index.cjs is what loads.
// tsconfig.json's paths point `ms` here; the types are the package's own.
import type { default as msFunction, StringValue as PackageStringValue } from '../node_modules/ms/dist/index.js';

declare const ms: typeof msFunction;
declare namespace ms {
  type StringValue = PackageStringValue;
}
export = ms;
