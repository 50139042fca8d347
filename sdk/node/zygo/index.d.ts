// Types of the zygo client (index.js). Records are the API's JSON as the daemon answers it
// (field names in snake_case, as in sdk/go/wire); the client's own results are camelCase.

/// <reference types="node" />

export const API_VERSION: 1;
export const SOCKET_NAME: 'zygo.sock';
export const TOKEN_NAME: 'api.token';
export const MAX_FORK_N: 16;

export function defaultStateDir(): string;
export function resolveStateDir(stateDir?: string): string;
/** The context file's path ($XDG_CONFIG_HOME/zygo/config.toml, else ~/.config/zygo/config.toml); null when unknown. */
export function contextPath(): string | null;
/** A context file's text as {key: value}; throws ConfigError naming file and line for anything but key = "string" lines. */
export function parseContext(text: string, file: string): Partial<Record<'address' | 'token' | 'ca' | 'server_name', string>>;
/** The gzip'd tar a deploy uploads for a function directory: what the Go SDK's PackDir packs (.zygoignore and the default ignores __pycache__/, .venv/, node_modules/ honoured; .git/ left out). */
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
/** The daemon's TLS certificate did not verify (wrong CA, or not for the name); the message says what to set. */
export class CertificateError extends ZygoError {
  constructor(message: string, where: string);
  /** The https address. */
  where: string;
}
/** An address, CA file or context file that is wrongly said; the message names where (file and key or line). */
export class ConfigError extends ZygoError {}
export class ApiVersionMismatch extends ZygoError {
  constructor(daemonVersion: string);
  daemonVersion: string;
}
/** Every error code of the API and its class. */
export const ERRORS: Record<string, typeof ZygoError>;

/**
 * Where the daemon is. Each setting is the option, else its environment variable, else the
 * context file ($XDG_CONFIG_HOME/zygo/config.toml, else ~/.config/zygo/config.toml: keys
 * address, token, ca, server_name), else a default, as the zygo CLI finds it.
 */
export interface ZygoOptions {
  /** The daemon's state directory (its socket is STATE/zygo.sock, its token STATE/api.token). Default $ZYGO_STATE_DIR. */
  stateDir?: string;
  /** The unix socket itself (an explicit address: no $ZYGO_ADDR or context file then). */
  socketPath?: string;
  /**
   * TCP: "host:port" (plain HTTP; TLS when a CA or server name is set), "https://host:port"
   * (TLS) or "http://host:port". Default $ZYGO_ADDR, else the context file's address, else
   * the unix socket.
   */
  addr?: string;
  /**
   * Bearer token for TCP. Default $ZYGO_TOKEN, else the context file's token (only with the
   * file's own address, never one given by option or $ZYGO_ADDR), else STATE/api.token.
   */
  token?: string;
  /** PEM CA file (or the daemon's self-signed certificate) for TLS. Default $ZYGO_CA, else the file's ca, else the system's roots. */
  ca?: string;
  /** The name the daemon's certificate must hold. Default the file's server_name (with its address only), else the host. */
  serverName?: string;
}

/** What a Zygo client resolved (Zygo#target). */
export interface Target {
  /** The unix socket, when the daemon is reached by one. */
  socketPath?: string;
  /** host:port, when the daemon is reached over TCP. */
  addr?: string;
  addrFrom?: string;
  tls?: boolean;
  ca?: string;
  serverName?: string;
  token?: string;
  /** "token", "$ZYGO_TOKEN", the context file's or the token file's path; "" when there is none. */
  tokenFrom?: string;
  contextPath: string | null;
}

export class Zygo {
  /** Throws ConfigError for an address, CA file or context file that is wrongly said. */
  constructor(opts?: ZygoOptions);
  /** The unix socket's path, or the TCP address ("https://host:port" for TLS). */
  readonly where: string;
  readonly target: Target;
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
  fork(n: number, fromCheckpoint?: string | CheckpointRecord | null, opts?: { names?: string[] }): Promise<ForkResult>;
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
