// The search attributes a training run sets (workflows/definitions.ts) must exist in the namespace,
// or the run's workflow tasks fail. `relax dev` registers them when its dev server starts; a control
// worker of any other deployment registers the missing ones when it starts (operator API), and
// says how to create them by hand where it may not (e.g. a hosted namespace).
import { Connection } from '@temporalio/client';
import { encodeSearchAttributeIndexedValueType } from '@temporalio/common/lib/search-attributes';
import { RELAX_SEARCH_ATTRIBUTES } from '../workflows/definitions';
import { sdkConnectionOptions, type TemporalConnectionOptions } from '../security/temporal-connection';

const INDEXED_TYPE = { Keyword: 'KEYWORD', Int: 'INT', Double: 'DOUBLE' } as const;

/** The `temporal` command that creates the named attributes. */
export function createSearchAttributesCommand(names: string[], namespace: string): string {
  const flags = names.map((n) => `--name ${n} --type ${RELAX_SEARCH_ATTRIBUTES[n as keyof typeof RELAX_SEARCH_ATTRIBUTES]}`).join(' ');
  return `temporal operator search-attribute create --namespace ${namespace} ${flags}`;
}

/** Registers the missing attributes; returns those still missing (with the reason) when it cannot. */
export async function ensureSearchAttributes(address: string, namespace: string, security: TemporalConnectionOptions): Promise<{ missing: string[]; error?: string }> {
  const connection = await Connection.connect({ address, connectTimeout: 5_000, ...sdkConnectionOptions(security) });
  try {
    const listed = await connection.operatorService.listSearchAttributes({ namespace });
    const existing = new Set(Object.keys(listed.customAttributes ?? {}));
    const missing = Object.keys(RELAX_SEARCH_ATTRIBUTES).filter((n) => !existing.has(n));
    if (!missing.length) return { missing };
    try {
      const searchAttributes = Object.fromEntries(missing.map((n) => [n, encodeSearchAttributeIndexedValueType(INDEXED_TYPE[RELAX_SEARCH_ATTRIBUTES[n as keyof typeof RELAX_SEARCH_ATTRIBUTES]]) as number]));
      await connection.operatorService.addSearchAttributes({ namespace, searchAttributes });
      return { missing: [] };
    } catch (err) {
      return { missing, error: (err as Error).message };
    }
  } finally {
    await connection.close();
  }
}
