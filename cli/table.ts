// Plain text tables for the CLI (relax list, doctor, health, metrics): cli-table3 without borders or
// colour, two spaces between columns and no trailing spaces, so piped output stays easy to grep.
import Table from 'cli-table3';

const NO_BORDER = { top: '', 'top-mid': '', 'top-left': '', 'top-right': '', bottom: '', 'bottom-mid': '', 'bottom-left': '', 'bottom-right': '', left: '', 'left-mid': '', mid: '', 'mid-mid': '', right: '', 'right-mid': '', middle: '  ' };

/** `rows` (under `head` when given) as left-aligned columns as wide as their widest cell. */
export function plainTable(rows: string[][], head: string[] = []): string {
  const table = new Table({ head, chars: NO_BORDER, style: { head: [], border: [], 'padding-left': 0, 'padding-right': 0 } });
  table.push(...rows);
  return table.toString().split('\n').map((line) => line.trimEnd()).join('\n');
}
