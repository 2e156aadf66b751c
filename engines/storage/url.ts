// Object-store URLs (s3://<bucket>/<key>) beside file paths: telling them apart, parsing and
// joining them. No SDK here, so code that only needs to know a location's form stays light.
import path from 'node:path';

const URL_RE = /^s3:\/\/([^/]+)\/(.+)$/;

/** Whether `location` is an object URL (s3://...) rather than a file path. */
export function isObjectUrl(location: string): boolean {
  return location.startsWith('s3://');
}

/** The bucket and key of an object URL; anything else is an error naming the expected form. */
export function parseObjectUrl(url: string): { bucket: string; key: string } {
  const m = URL_RE.exec(url);
  if (!m || m[2].split('/').some((part) => part === '' || part === '.' || part === '..')) {
    throw new Error(`${JSON.stringify(url)} is not an object URL: expected s3://<bucket>/<key> with no empty, '.' or '..' segment`);
  }
  return { bucket: m[1], key: m[2] };
}

/** `base` joined with `parts`: a path for files, '/'-joined for object URLs. */
export function joinLocation(base: string, ...parts: string[]): string {
  if (!isObjectUrl(base)) return path.join(base, ...parts);
  return [base.replace(/\/+$/, ''), ...parts].join('/');
}

/** The last segment of a location (the directory or object name). */
export function baseName(location: string): string {
  return location.replace(/\/+$/, '').split('/').pop() ?? '';
}

