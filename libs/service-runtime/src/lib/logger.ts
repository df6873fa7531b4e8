import type { LoggerService, LogLevel } from '@nestjs/common';

const LEVELS: LogLevel[] = ['verbose', 'debug', 'log', 'warn', 'error', 'fatal'];

/** Keys whose values never reach a log line. */
const SECRET_KEYS = /pass(word)?|secret|token|authorization|api[-_]?key|private[-_]?key|credential/i;

export function redact(value: unknown, depth = 0): unknown {
  if (depth > 6 || value === null || typeof value !== 'object') return value;
  if (Array.isArray(value)) return value.map((v) => redact(v, depth + 1));
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) out[k] = SECRET_KEYS.test(k) && typeof v !== 'number' ? '***' : redact(v, depth + 1);
  return out;
}

/** One JSON object per line: level, time, service, context, message and the structured fields. */
export class JsonLogger implements LoggerService {
  private readonly minimum: number;

  constructor(
    private readonly service: string,
    level: string = process.env.LOG_LEVEL ?? 'log',
    private readonly write: (line: string) => void = (line) => process.stdout.write(line + '\n'),
  ) {
    const index = LEVELS.indexOf(level as LogLevel);
    this.minimum = index === -1 ? 2 : index;
  }

  private emit(level: LogLevel, message: unknown, rest: unknown[]): void {
    if (LEVELS.indexOf(level) < this.minimum) return;
    const context = typeof rest[rest.length - 1] === 'string' ? (rest.pop() as string) : undefined;
    const entry: Record<string, unknown> = { level, time: new Date().toISOString(), service: this.service };
    if (context) entry.context = context;
    if (message !== null && typeof message === 'object' && !(message instanceof Error)) Object.assign(entry, redact(message));
    else entry.message = message instanceof Error ? message.message : String(message);
    for (const extra of rest) {
      if (extra && typeof extra === 'object') Object.assign(entry, redact(extra));
      else if (typeof extra === 'string' && level === 'error') entry.stack = extra;
    }
    this.write(JSON.stringify(entry));
  }

  log(message: unknown, ...rest: unknown[]): void { this.emit('log', message, rest); }
  error(message: unknown, ...rest: unknown[]): void { this.emit('error', message, rest); }
  warn(message: unknown, ...rest: unknown[]): void { this.emit('warn', message, rest); }
  debug(message: unknown, ...rest: unknown[]): void { this.emit('debug', message, rest); }
  verbose(message: unknown, ...rest: unknown[]): void { this.emit('verbose', message, rest); }
  fatal(message: unknown, ...rest: unknown[]): void { this.emit('fatal', message, rest); }

  /** The `(message, fields)` shape the libraries log with. */
  forComponent(component: string) {
    return {
      log: (message: string, fields: Record<string, unknown> = {}) => this.log({ message, ...fields }, component),
      warn: (message: string, fields: Record<string, unknown> = {}) => this.warn({ message, ...fields }, component),
      error: (message: string, fields: Record<string, unknown> = {}) => this.error({ message, ...fields }, component),
    };
  }
}
