// Types of the npm package script-harness.

/** JSON values, as tools receive and return them. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** The error codes of `Report.error.code`. */
export type ErrorCodeName =
  | 'ScriptSyntaxError'
  | 'BannedIdentifierError'
  | 'ScriptTooLargeError'
  | 'ScriptRuntimeError'
  | 'ScriptTimeoutError'
  | 'ScriptMemoryError'
  | 'StackOverflowError'
  | 'ScriptCancelledError'
  | 'ToolNotFoundError'
  | 'ToolValidationError'
  | 'ToolBudgetExceededError'
  | 'ConcurrencyLimitError'
  | 'ApprovalDeniedError'
  | 'ApprovalTimeoutError'
  | 'ToolExecutionError'
  | 'DetachedPromiseError'
  | 'SerializationError'
  | 'ReturnValueTooLargeError'
  | 'HarnessInternalError'
  | 'SessionClosedError'
  | 'ContinuationInvalidError'
  | 'UnsupportedError';

export declare const ErrorCode: { readonly [K in ErrorCodeName]: K };

/** A tool written in JavaScript. */
export interface Tool<Args = any, Result = unknown> {
  /** One line on what it does, for the model. */
  description?: string;
  /** JSON Schema of the arguments; checked before `execute` runs. */
  parameters?: object;
  /** Runs one call; `signal` aborts when the script no longer needs it (absent for a deferred tool). */
  execute?(args: Args, context: { signal: AbortSignal }): Result | Promise<Result>;
  /** Whether a call needs approval (a function is asked per call). */
  needsApproval?: boolean | ((args: Args) => boolean | Promise<boolean>);
  /**
   * The tool's results arrive from outside (a person, a webhook): a call
   * suspends a run of a harness with `suspend` (engine `wasi`), and its
   * answer is given to `resume`. In any other run it fails with
   * ToolExecutionError.
   */
  deferred?: boolean;
}

/** What an `approvals` callback returns to put the run away instead of answering now. */
export declare const SUSPEND: 'suspend';

/** A run put away while it waits on answers from outside. */
export interface Suspension {
  /** The sealed continuation `resume` takes. */
  continuation: string;
  id: string;
  pending: { call_id: number; tool: string; args: Json; kind: 'approval' | 'deferred' }[];
  /** RFC 3339. */
  expires_at: string;
}

/** The answers `resume` gives the calls a suspended run waits on. */
export interface ResumeAnswers {
  /** Every approval it waits on: given or refused. */
  approve?: boolean;
  /** Deferred calls' results, by call id. */
  answers?: Record<number, Json>;
  /** Deferred calls' failures (ToolExecutionError), by call id. */
  failures?: Record<number, string>;
}

/** What an approval callback is asked. */
export interface ApprovalRequest {
  request_id: string;
  script_id: string;
  call_id: number;
  task_id?: string | null;
  tool: string;
  args: Json;
  line?: number | null;
  column?: number | null;
  snippet?: string | null;
}

/** Limits, by their snake_case or camelCase names. */
export interface Limits {
  timeout_ms?: number;
  timeoutMs?: number;
  memory_bytes?: number;
  memoryBytes?: number;
  max_tool_calls?: number;
  maxToolCalls?: number;
  max_concurrent_tool_calls?: number;
  maxConcurrentToolCalls?: number;
  [name: string]: number | string | boolean | null | undefined;
}

export interface HarnessOptions {
  /** `quickjs` (the engine built into this package). */
  engine?: 'quickjs';
  /** `in_process` (default) or `process` (needs HARNESS_WORKER_BIN: the `harness` CLI). */
  isolation?: 'in_process' | 'process';
  limits?: Limits;
  tools?: Record<string, Tool>;
  /** Names of the tools scripts may see (default: all). */
  allow?: string[];
  /** Answers approval requests; without it every request is denied. */
  approvals?: (request: ApprovalRequest) => boolean | 'suspend' | Promise<boolean | 'suspend'>;
  mode?: 'enabled' | 'dry-run' | 'disabled';
  /** A harness.toml configuration file. */
  config?: string;
  /** Its `[providers.NAME]` table. */
  provider?: string;
  /**
   * For runs a few milliseconds apart: keep the engine warm this long
   * after each run (a trivial rehearsal about every 0.8 ms, a few per cent
   * of a CPU meanwhile). Off by default; 0 turns off a file's
   * `[workers] keep_warm_ms`.
   */
  keepWarmMs?: number;
  /**
   * With `keepWarmMs`: the engine thread also stays awake through its
   * window, polling for the next run instead of sleeping, so that a run a
   * few milliseconds after the last costs about what one back to back
   * does, for most of a CPU through each window. Off by default; `false`
   * turns off a file's `[workers] keep_warm_awake`.
   */
  keepWarmAwake?: boolean;
  /**
   * Whether the engine anticipates runs that come at a steady pace: after
   * 8 runs that each followed about the same pause, it wakes shortly
   * before the next is due and waits for it awake (a run 2 ms after the
   * last then costs about half as much, for a tenth of a CPU or so while
   * runs keep that pace; lone and irregular runs cost nothing). On by
   * default; `false` turns it off, over a file's `[workers] anticipate`.
   */
  anticipate?: boolean;
  /**
   * Runs may suspend (engine `wasi`): an approval answered `SUSPEND`, or
   * a call of a deferred tool, puts the run away; `resume` goes on with
   * `report.suspension.continuation`. `keys`: 32-byte keys as base64 or
   * hex, the first sealing; `true`: the `config` file's `[durable]` keys,
   * or a key file of this user's.
   */
  suspend?: boolean | { keys: string[]; maxSuspendedMs?: number };
}

/** The context object scripts see (camelCase keys). */
export interface ScriptContext {
  conversationId?: string;
  sessionId?: string;
  turnId?: string;
  provider?: string;
  model?: string;
  workingDirectory?: string;
  identity?: Json;
  extra?: Json;
}

export interface RunOptions {
  context?: ScriptContext;
  /** Cancels the run (ScriptCancelledError, partial results kept). */
  signal?: AbortSignal;
  timeoutMs?: number;
  language?: 'js' | 'ts' | 'auto';
  /** Runs in this session (an id `openSession` gave). */
  session?: string;
}

export interface ScriptError {
  code: ErrorCodeName;
  message: string;
  phase: 'parsing' | 'executing' | 'finalizing';
  name?: string;
  stack?: string;
  tool?: string;
  call_id?: number;
  location?: { line: number; column: number };
  stderr?: string;
  metadata?: { elapsedMs: number; completedTools: number; pendingTools: number; partialResults?: boolean };
}

export interface ToolCallRecord {
  id: number;
  tool: string;
  status: 'ok' | 'error' | 'cancelled' | 'pending' | 'detached';
  duration_ms: number;
  error?: { code: ErrorCodeName; message: string; stderr?: string };
}

/** A run's report: the same fields as the JSON report of `harness run --json`. */
export interface Report {
  ok: boolean;
  value?: Json;
  error: ScriptError | null;
  console: { level: 'log' | 'info' | 'warn' | 'error' | 'debug'; text: string }[];
  console_dropped: number;
  tool_calls: ToolCallRecord[];
  tool_calls_dropped: number;
  approvals: { request_id?: string; call_id: number; tool: string; args: Json; outcome: string; duration_ms: number; line?: number }[];
  progress: { message: string; kind?: 'info' | 'warn'; data?: Json; elapsed_ms?: number }[];
  progress_dropped: number;
  metrics: { engine: string; duration_ms: number; tool_calls: number; memory_used_bytes?: number; fuel_consumed?: number };
  script_id: string;
  warnings?: { message: string; path: string }[];
  /** Present only when the run suspended (then `ok` is false and `error` null). */
  suspension?: Suspension;
  /** The session a resumed session run went on in (a new one). */
  session?: string;
  [key: string]: unknown;
}

export declare class Harness {
  constructor(options?: HarnessOptions);
  /** Runs a script (the body of an async function); never rejects for the script's own failure. */
  run(code: string, options?: RunOptions): Promise<Report>;
  /** Syntax and banned identifiers: null, or the error. */
  check(code: string): Promise<ScriptError | null>;
  /** Opens a session: its runs keep what their top level declared, for the session only. */
  openSession(): Session;
  /** Resumes a suspended run; resolves to its next report (completed, failed, or suspended again). */
  resume(continuation: string, answers?: ResumeAnswers): Promise<Report>;
  /** TypeScript declarations of `tools`, `context` and `console` for the model. */
  typescript(): string;
  /** Runs the `<tool-calls>` blocks of a model response; resolves to conversation items. */
  respond(text: string, options?: { format?: 'items' | 'openai-responses' | 'chat' | 'anthropic' }): Promise<unknown[]>;
  /** Cancels every run and releases the engine and callbacks. */
  close(): void;
  [Symbol.asyncDispose](): Promise<void>;
}

/** A session of a Harness: runs through it share their top-level declarations. */
export declare class Session {
  /** The id the harness drew: 32 hex digits. */
  readonly id: string;
  /** `harness.run` in this session. */
  run(code: string, options?: Omit<RunOptions, 'session'>): Promise<Report>;
  /** Closes the session (its state is gone); false if it was not open. */
  close(): boolean;
  [Symbol.dispose](): void;
}
