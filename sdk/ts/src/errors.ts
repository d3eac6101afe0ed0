/** A field a VALIDATION_FAILED answer names. */
export interface FieldViolation {
  field: string;
  description: string;
}

/** The reasons a client acts on (ErrorInfo reasons). */
export const Reasons = {
  IdempotencyKeyReused: "IDEMPOTENCY_KEY_REUSED",
  AlreadyProcessing: "ALREADY_PROCESSING",
  Validation: "VALIDATION_FAILED",
  NotFound: "NOT_FOUND",
  RateLimited: "RATE_LIMITED",
  Unavailable: "UNAVAILABLE",
  Unauthenticated: "UNAUTHENTICATED",
  ScheduleState: "SCHEDULE_STATE",
  TooManyPending: "TOO_MANY_PENDING",
  NoTenant: "NO_TENANT",
} as const;

/** A reason's name. */
export type Reason = (typeof Reasons)[keyof typeof Reasons] | (string & {});

const codeNames = [
  "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
  "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED",
  "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED",
];

/**
 * The API's refusal: the HTTP status, the google.rpc.Status it carried,
 * its ErrorInfo reason and metadata, and its field violations.
 */
export class PayschedError extends Error {
  readonly status: number;
  readonly code: string;
  readonly reason: Reason;
  readonly metadata: Record<string, string>;
  readonly violations: FieldViolation[];
  readonly requestId: string;

  constructor(status: number, body: unknown, requestId = "") {
    const s = (typeof body === "object" && body !== null ? body : {}) as {
      code?: unknown; message?: unknown; details?: unknown;
    };
    const message = typeof s.message === "string" ? s.message : typeof body === "string" ? body.slice(0, 200) : "";
    let reason = "";
    let metadata: Record<string, string> = {};
    const violations: FieldViolation[] = [];
    for (const d of Array.isArray(s.details) ? s.details : []) {
      const detail = d as { "@type"?: string; reason?: string; metadata?: Record<string, string>; fieldViolations?: FieldViolation[] };
      const type = detail["@type"] ?? "";
      if (type.endsWith("google.rpc.ErrorInfo")) {
        reason = detail.reason ?? "";
        metadata = detail.metadata ?? {};
      } else if (type.endsWith("google.rpc.BadRequest")) {
        for (const v of detail.fieldViolations ?? []) violations.push({ field: v.field, description: v.description });
      }
    }
    const code = typeof s.code === "number" ? (codeNames[s.code] ?? String(s.code)) : typeof s.code === "string" ? s.code : "";
    super(`paysched: ${status} ${reason || code}${message ? ": " + message : ""}`);
    this.name = "PayschedError";
    this.status = status;
    this.code = code;
    this.reason = reason;
    this.metadata = metadata;
    this.violations = violations;
    this.requestId = requestId;
  }

  /** Whether the refusal's reason is r. */
  is(r: Reason): boolean {
    return this.reason === r;
  }
}

/** Whether err is a PayschedError with reason r. */
export function isReason(err: unknown, r: Reason): err is PayschedError {
  return err instanceof PayschedError && err.reason === r;
}
