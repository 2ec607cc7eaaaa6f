/** How much a log record matters: `debug` < `info` < `warn` < `error`. */
export type LogLevel = 'debug' | 'info' | 'warn' | 'error';

/**
 * One log record, the one shape every component of AWC logs: its level, a short message, and
 * the fields that say what it is about (`{level: 'warn', msg: 'remount failed', workspace,
 * err}`), flat beside them. Written as one JSON line by whoever prints (the daemon's stderr:
 * `awc daemon run`); a library never prints it itself.
 */
export interface LogRecord {
  level: LogLevel;
  msg: string;
  /** Fields of the record (JSON values: strings, numbers, booleans, arrays and objects of them). */
  [field: string]: unknown;
}

/**
 * The logger port: where a component writes its log records. Given as a constructor option;
 * a component given none emits each record as its `'log'` event ({@link LogEvents}).
 */
export type Logger = (record: LogRecord) => void;

/** The `'log'` event of a component that logs (part of its typed EventEmitter map). */
export interface LogEvents {
  log: [record: LogRecord];
}
