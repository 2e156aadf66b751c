// Objects in an S3-compatible store, addressed by URL (`s3://<bucket>/<key>`): the one place that
// talks to the object store (through the AWS SDK's S3 client), for the checkpoint and media code
// (engines/checkpoint.ts, engines/media/store.ts) when RELAX_STORAGE names one
// (config/environment-storage.ts). Large bodies go up as multipart uploads (@aws-sdk/lib-storage);
// a missing object reads as ObjectNotFoundError, whose `code` is 'ENOENT' like a missing file's,
// so callers treat both alike. Reads of immutable objects go through the local cache
// (./object-cache.ts). Loaded only when a location is an object URL (./locations.ts), so a process
// that keeps files never loads the SDK.
import { CreateBucketCommand, DeleteObjectsCommand, GetObjectCommand, HeadBucketCommand, HeadObjectCommand, ListObjectsV2Command, S3Client, type S3ClientConfig } from '@aws-sdk/client-s3';
import { Upload } from '@aws-sdk/lib-storage';
import { objectStorageSettings, silenceSdkNodeVersionWarning, type ObjectStorageSettings } from '../../config/environment';
import { parseObjectUrl } from './url';

/** Multipart part size: bodies above it are uploaded in parts of this size, 4 at a time. */
export const MULTIPART_PART_BYTES = 8 * 1024 * 1024;

/** An object that is not in the store (code 'ENOENT', like a missing file). */
export class ObjectNotFoundError extends Error {
  override readonly name = 'ObjectNotFoundError';
  readonly code = 'ENOENT';
}

const isNotFound = (err: unknown): boolean => {
  const e = err as { name?: string; $metadata?: { httpStatusCode?: number } };
  return e?.name === 'NoSuchKey' || e?.name === 'NotFound' || e?.$metadata?.httpStatusCode === 404;
};

/** An S3-compatible object store: put, get, list and delete by URL. */
export class ObjectStore {
  readonly client: S3Client;

  constructor(readonly settings: ObjectStorageSettings) {
    silenceSdkNodeVersionWarning();
    const config: S3ClientConfig = {
      region: settings.region,
      ...(settings.endpoint ? { endpoint: settings.endpoint, forcePathStyle: true } : {}),
      ...(settings.credentials ? { credentials: settings.credentials } : {}),
      // Checksums only where the server asks for them: S3-compatible servers differ in what they accept.
      requestChecksumCalculation: 'WHEN_REQUIRED',
      responseChecksumValidation: 'WHEN_REQUIRED',
      maxAttempts: 5,
    };
    this.client = new S3Client(config);
  }

  /** Writes `bytes` to `url` (a multipart upload above MULTIPART_PART_BYTES); replaces what was there. */
  async put(url: string, bytes: Uint8Array, contentType = 'application/octet-stream'): Promise<void> {
    const { bucket, key } = parseObjectUrl(url);
    const upload = new Upload({
      client: this.client,
      params: { Bucket: bucket, Key: key, Body: bytes, ContentType: contentType },
      partSize: MULTIPART_PART_BYTES,
      queueSize: 4,
      leavePartsOnError: false,
    });
    await upload.done();
  }

  /** The bytes at `url`; ObjectNotFoundError when there is no such object. */
  async get(url: string): Promise<Uint8Array> {
    const { bucket, key } = parseObjectUrl(url);
    try {
      const out = await this.client.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
      if (!out.Body) throw new Error(`object ${url}: the store returned no body`);
      return await out.Body.transformToByteArray();
    } catch (err) {
      if (isNotFound(err)) throw new ObjectNotFoundError(`object ${url} is not in the store`);
      throw err;
    }
  }

  /** Whether an object is at `url` (a HEAD request: nothing is downloaded). */
  async exists(url: string): Promise<boolean> {
    const { bucket, key } = parseObjectUrl(url);
    try {
      await this.client.send(new HeadObjectCommand({ Bucket: bucket, Key: key }));
      return true;
    } catch (err) {
      if (isNotFound(err)) return false;
      throw err;
    }
  }

  /** The URLs of every object under `prefixUrl` (a 'directory': a trailing '/' is implied). */
  async list(prefixUrl: string): Promise<string[]> {
    const { bucket, key } = parseObjectUrl(prefixUrl);
    const prefix = `${key.replace(/\/+$/, '')}/`;
    const urls: string[] = [];
    let token: string | undefined;
    do {
      const out = await this.client.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: prefix, ...(token ? { ContinuationToken: token } : {}) }));
      for (const o of out.Contents ?? []) if (o.Key) urls.push(`s3://${bucket}/${o.Key}`);
      token = out.IsTruncated ? out.NextContinuationToken : undefined;
    } while (token);
    return urls;
  }

  /** Deletes the objects at `urls` (missing ones are fine), 1000 per request. */
  async delete(urls: readonly string[]): Promise<void> {
    const byBucket = new Map<string, string[]>();
    for (const url of urls) {
      const { bucket, key } = parseObjectUrl(url);
      byBucket.set(bucket, [...(byBucket.get(bucket) ?? []), key]);
    }
    for (const [bucket, keys] of byBucket) {
      for (let i = 0; i < keys.length; i += 1000) {
        const out = await this.client.send(new DeleteObjectsCommand({ Bucket: bucket, Delete: { Objects: keys.slice(i, i + 1000).map((Key) => ({ Key })), Quiet: true } }));
        const failed = (out.Errors ?? []).filter((e) => e.Code !== 'NoSuchKey');
        if (failed.length) throw new Error(`deleting ${failed.length} object(s) in bucket ${bucket} failed: ${failed.slice(0, 3).map((e) => `${e.Key}: ${e.Code} ${e.Message}`).join('; ')}`);
      }
    }
  }

  /** Creates the settings' bucket when it does not exist (relax dev and tests; production buckets are made by their owners). */
  async ensureBucket(): Promise<void> {
    const Bucket = this.settings.bucket;
    try {
      await this.client.send(new HeadBucketCommand({ Bucket }));
    } catch (err) {
      if (!isNotFound(err)) throw err;
      await this.client.send(new CreateBucketCommand({ Bucket })).catch((e: { name?: string }) => {
        if (e?.name !== 'BucketAlreadyOwnedByYou' && e?.name !== 'BucketAlreadyExists') throw e;
      });
    }
  }

  destroy(): void {
    this.client.destroy();
  }
}

let shared: { key: string; store: ObjectStore } | undefined;

/** This process's object store (RELAX_STORAGE and friends), made once; throws when none is configured. */
export function objectStore(env: NodeJS.ProcessEnv = process.env): ObjectStore {
  const settings = objectStorageSettings(env);
  if (!settings) throw new Error('an s3:// location was given but RELAX_STORAGE is not set on this process: set RELAX_STORAGE=s3://<bucket>[/<prefix>] (and RELAX_S3_ENDPOINT for a server other than AWS) on every Relax process');
  const key = JSON.stringify(settings);
  if (shared?.key !== key) {
    shared?.store.destroy();
    shared = { key, store: new ObjectStore(settings) };
  }
  return shared.store;
}
