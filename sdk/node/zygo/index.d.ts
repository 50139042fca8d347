// Types of the zygo client (index.js). Records are the API's JSON as the daemon answers it
// (field names in snake_case, as in sdk/go/wire); the client's own results are camelCase.

/// <reference types="node" />

export const API_VERSION: 1;
export const SOCKET_NAME: 'zygo.sock';
export const TOKEN_NAME: 'api.token';
export const MAX_FORK_N: 16;

export function defaultStateDir(): string;
export function resolveStateDir(stateDir?: string): string;
/** The gzip'd tar a deploy uploads for a function directory. */
export function packDir(dir: string): Buffer;
/** The HTTP status the daemon answers an error code with. */
export function statusOf(code: string): number;
export function fromBody(status: number, body: ErrorBody, headers?: Record<string, string | string[] | undefined>): ZygoError;

export interface ErrorBody {
  code: string;
  message: string;
  type?: string;
  traceback?: string;
  request_id?: string;
}

export class ZygoError extends Error {
  constructor(message: string, opts?: { status?: number; code?: string; body?: Partial<ErrorBody>; headers?: Record<string, unknown> });
  /** The API's error code ("not_found"); "http" for an answer without an error body. */
  code: string;
  /** HTTP status; 0 when no answer came. */
  status: number;
  body: Partial<ErrorBody>;
  headers: Record<string, string | string[] | undefined>;
  type: string | null;
  traceback: string | null;
  requestId: string | null;
  /** The whole JSON answer when it held more than the error (a fork whose every child failed). */
  answer: unknown;
  static code?: string;
}
export class NotFound extends ZygoError {}
export class BadRequest extends ZygoError {}
export class TooLarge extends ZygoError {}
export class Conflict extends ZygoError {}
export class AlreadyExists extends Conflict {}
export class FailedPrecondition extends Conflict {}
export class PermissionDenied extends ZygoError {}
export class Unavailable extends ZygoError {}
export class DeadlineExceeded extends ZygoError {}
export class Cancelled extends ZygoError {}
export class Internal extends ZygoError {}
export class Unauthenticated extends ZygoError {}
export class ImportFailed extends ZygoError {}
export class TooManyRequests extends ZygoError {
  /** Retry-After, seconds, or null. */
  readonly retryAfter: number | null;
}
export class MethodNotAllowed extends ZygoError {
  /** The methods the route takes (Allow). */
  readonly allow: string[];
}
export class InvokeError extends ZygoError {}
export class HandlerError extends InvokeError {}
export class InvokeTimeout extends InvokeError {}
export class Crashed extends InvokeError {}
export class ZygoteDied extends InvokeError {}
export class ResponseTooLarge extends InvokeError {}
export class LimitExceeded extends InvokeError {}
export class BadEvent extends InvokeError {}
export class HTTPError extends ZygoError {}
export class Unreachable extends ZygoError {
  constructor(message: string, where: string);
  /** The socket's path or the TCP address. */
  where: string;
}
export class ApiVersionMismatch extends ZygoError {
  constructor(daemonVersion: string);
  daemonVersion: string;
}
/** Every error code of the API and its class. */
export const ERRORS: Record<string, typeof ZygoError>;

export interface ZygoOptions {
  /** The daemon's state directory (its socket is STATE/zygo.sock, its token STATE/api.token). */
  stateDir?: string;
  /** The unix socket itself. */
  socketPath?: string;
  /** TCP: "host:port", or "https://host:port". Default $ZYGO_ADDR. */
  addr?: string;
  /** Bearer token for TCP. Default $ZYGO_TOKEN, else STATE/api.token. */
  token?: string;
  /** CA file to check an https:// daemon's certificate with. */
  ca?: string;
}

export class Zygo {
  constructor(opts?: ZygoOptions);
  readonly where: string;
  readonly functions: Functions;
  readonly sandboxes: Sandboxes;
  readonly checkpoints: Checkpoints;
  status(): Promise<{ version: string; uptime_ms: number; functions: number; api_version?: number; [k: string]: unknown }>;
}

export interface Check { name: string; level: 'info' | 'warn'; detail: string }
export interface DeployResult {
  name: string;
  version: string;
  unchanged: boolean;
  mode: string;
  fallback?: string;
  checks?: Check[];
  ready_ms: number;
}
export interface FunctionRecord {
  name: string;
  version: string;
  runtime: string;
  mode: string;
  state: string;
  in_flight: number;
  served: number;
  manifest: Record<string, unknown> | null;
  [k: string]: unknown;
}
export interface InvokeResult<T = unknown> {
  value: T;
  raw: string;
  requestId: string;
  version: string;
  child: string;
  elapsedMs: number;
  serverTiming: { name: string; ms: number }[];
}
export interface LogLine {
  id: number;
  function: string;
  version: string;
  request_id?: string;
  stream: 'stdout' | 'stderr' | 'zygo';
  at: string;
  line: string;
}
export interface LogsPage { lines: LogLine[]; next: number }

export class Functions {
  deploy(dir: string): Promise<DeployResult>;
  deployBundle(bundle: Buffer): Promise<DeployResult>;
  invoke<T = unknown>(name: string, event?: unknown): Promise<InvokeResult<T>>;
  logs(name: string, opts?: { requestId?: string; after?: number; limit?: number }): Promise<LogsPage>;
  list(opts?: { pageSize?: number }): Promise<FunctionRecord[]>;
  get(name: string): Promise<FunctionRecord>;
  remove(name: string): Promise<void>;
}

export interface Service {
  name: string;
  argv: string[];
  env?: string[];
  on_fork?: 'restart' | 'signal' | 'keep';
  signal?: number;
  restart?: 'on-failure' | 'always' | 'no';
}
export interface CreateOptions {
  name?: string;
  rootfs_dir?: string;
  services?: Service[];
  env?: string[];
  secrets?: string[];
  memory_mib?: number;
  pids?: number;
  cpus?: number;
  network?: { mode?: 'egress' | 'none'; allow?: string[]; deny?: string[] };
  [k: string]: unknown;
}
export interface SandboxRecord {
  id: string;
  name: string;
  backend: string;
  state: string;
  parent_id?: string;
  checkpoint_id?: string;
  generation: string;
  options: CreateOptions;
  created_at: string;
  updated_at: string;
  [k: string]: unknown;
}
export interface CheckpointRecord {
  id: string;
  tag?: string;
  sandbox_id: string;
  parent_id?: string;
  size_bytes: number;
  generation: string;
  created_at: string;
  [k: string]: unknown;
}
export interface FileInfo { name: string; size: number; mode: number; mod_time: string; is_dir: boolean }
export interface ExecOptions {
  env?: string[];
  cwd?: string;
  /** Seconds; then SIGTERM to its process group, SIGKILL 2 s later. */
  timeout?: number;
  /** Sent whole (string, Buffer) or streamed while the command runs (async iterable, Readable). */
  stdin?: string | Uint8Array | AsyncIterable<Uint8Array | string>;
}
export interface Output { stream: 'stdout' | 'stderr'; data: Buffer }
export interface ExecResult { exitCode: number; signal: number; timedOut: boolean; stdout: Buffer; stderr: Buffer }
export interface CodeResult {
  ok: boolean;
  value: string | null;
  error: string | null;
  stdout: string;
  stderr: string;
  outputTruncated: boolean;
  restarted: boolean;
}

export class ExecStream implements AsyncIterable<Output> {
  [Symbol.asyncIterator](): AsyncIterator<Output>;
  exitCode: number | null;
  signal: number;
  timedOut: boolean;
  wait(): Promise<number>;
  close(): void;
}

export class Files {
  write(path: string, data: string | Uint8Array, opts?: { mode?: number }): Promise<void>;
  read(path: string): Promise<Buffer>;
  list(path: string): Promise<FileInfo[]>;
}

export class Sandbox {
  readonly id: string;
  readonly name: string;
  record: SandboxRecord;
  readonly files: Files;
  refresh(): Promise<SandboxRecord>;
  exec(argv: string[], opts?: ExecOptions): Promise<ExecResult>;
  execStream(argv: string[], opts?: ExecOptions): Promise<ExecStream>;
  runCode(code: string, opts?: { timeout?: number }): Promise<CodeResult>;
  checkpoint(tag?: string): Promise<CheckpointRecord>;
  checkpoints(opts?: { pageSize?: number }): Promise<CheckpointRecord[]>;
  fork(n: number, fromCheckpoint?: string | CheckpointRecord): Promise<ForkResult>;
  rollback(checkpoint: string | CheckpointRecord): Promise<void>;
  generation(): Promise<string>;
  kill(): Promise<void>;
  /** kill(), a sandbox already gone being no error; also [Symbol.asyncDispose] where it exists. */
  dispose(): Promise<void>;
}

export interface ForkChild { index: number; sandbox: Sandbox | null; error: ZygoError | null }
export class ForkResult {
  checkpoint: CheckpointRecord;
  children: ForkChild[];
  readonly sandboxes: Sandbox[];
  dispose(): Promise<void>;
}

export class Sandboxes {
  create(opts?: CreateOptions): Promise<Sandbox>;
  use<T>(opts: CreateOptions | undefined, fn: (sb: Sandbox) => Promise<T>): Promise<T>;
  get(idOrName: string): Promise<Sandbox>;
  list(opts?: { pageSize?: number }): Promise<Sandbox[]>;
}

export class Checkpoints {
  list(opts?: { sandbox?: string; pageSize?: number }): Promise<CheckpointRecord[]>;
  get(checkpoint: string): Promise<CheckpointRecord>;
  remove(checkpoint: string | CheckpointRecord): Promise<void>;
}
