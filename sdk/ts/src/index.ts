/**
 * The TypeScript SDK of paysched's payments API: openapi-fetch over the
 * types openapi-typescript generates from the API's OpenAPI document
 * (schema.ts), under a core that does what payment integrations get wrong
 * by hand: an idempotency key per create, reused by its retries; retries
 * that honour Retry-After; async iteration over cursor pages; typed
 * errors; a batch helper; webhook verification (./webhook).
 */
import createFetchClient, { type Client as FetchClient } from "openapi-fetch";
import { randomUUID } from "node:crypto";
import type { components, paths } from "./schema.js";
import { PayschedError } from "./errors.js";
import { defaultRetry, retrying, retrySafeHeader, type RetryPolicy, type Sleep } from "./retry.js";

export { PayschedError, Reasons, isReason, type FieldViolation, type Reason } from "./errors.js";
export { defaultRetry, type RetryPolicy } from "./retry.js";
export type { components, paths, operations } from "./schema.js";

type Schemas = components["schemas"];
/** A scheduled payment. */
export type Payment = Schemas["v1ScheduledPayment"];
/** A payment to schedule. */
export type NewPayment = Schemas["v1CreateScheduledPaymentRequest"];
/** One item's outcome of createPayments. */
export type BatchResult = Schemas["v1BatchCreateResult"];
/** A recurring payment plan. */
export type Schedule = Schemas["v1Schedule"];
/** A schedule to make. */
export type NewSchedule = Schemas["v1CreateScheduleRequest"];
/** A tenant's webhook endpoint. */
export type Endpoint = Schemas["v1WebhookEndpoint"];
/** An endpoint to register. */
export type NewEndpoint = Schemas["v1CreateEndpointRequest"];
/** A payment's status. */
export type Status = NonNullable<Payment["status"]>;

/** What a create answered. */
export interface Created<T> {
  value: T;
  /** The server answered an earlier request with this key: nothing new was made. */
  replayed: boolean;
  idempotencyKey: string;
}

/** The client's settings. */
export interface Options {
  /** A bearer token (a JWT), or a function that returns the current one (OAuth2). */
  token?: string | (() => string | Promise<string>);
  retry?: RetryPolicy;
  /** The fetch to send with (default: the global fetch). */
  fetch?: typeof fetch;
  /** How long one attempt may take, in ms (default 30 s): a hung connection is a network error, retried. */
  timeoutMs?: number;
  /** @internal tests: how to wait between retries. */
  sleep?: Sleep;
}

/** Per-call options of a create. */
export interface CreateOptions {
  /** The create's key; one is made for the call when absent. */
  idempotencyKey?: string;
  signal?: AbortSignal;
}

/** The most items the server takes in one batch; createPayments splits longer lists. */
export const maxBatch = 1000;
/** The most bytes of items createPayments sends in one batch (the server takes 8 MiB). */
const maxBatchBytes = 4 << 20;

/** A fresh idempotency key. */
export const newKey = (): string => randomUUID();

/** A client of the payments API. */
export class Paysched {
  /** The generated client of every operation, through this client's credentials and retries. */
  readonly api: FetchClient<paths>;

  constructor(baseUrl: string, opts: Options = {}) {
    const u = new URL(baseUrl);
    if (u.protocol !== "http:" && u.protocol !== "https:") throw new TypeError(`paysched: base URL ${baseUrl}: want http(s)`);
    const inner = opts.fetch ?? globalThis.fetch;
    const send = retrying(inner, opts.retry ?? defaultRetry, opts.sleep, opts.timeoutMs ?? 30_000);
    const token = opts.token;
    this.api = createFetchClient<paths>({
      baseUrl: baseUrl.replace(/\/+$/, ""),
      fetch: async (req: Request) => {
        if (token !== undefined) {
          req.headers.set("authorization", "Bearer " + (typeof token === "string" ? token : await token()));
        }
        return send(req);
      },
    });
  }

  /**
   * Schedules a payment, with an idempotency key (made for the call unless
   * given) that each retry sends again: at most one payment is made.
   */
  async createPayment(p: NewPayment, o: CreateOptions = {}): Promise<Created<Payment>> {
    const key = o.idempotencyKey ?? newKey();
    const { data, error, response } = await this.api.POST("/v1/scheduled-payments", {
      params: { header: { "Idempotency-Key": key } }, body: p, signal: o.signal,
    });
    return { value: answer(data, error, response), replayed: response.headers.get("idempotent-replayed") === "true", idempotencyKey: key };
  }

  /** Reads a payment with its attempts. */
  async getPayment(id: string): Promise<Payment> {
    const { data, error, response } = await this.api.GET("/v1/scheduled-payments/{paymentId}", { params: { path: { paymentId: id } } });
    return answer(data, error, response);
  }

  /** Cancels a PENDING payment; ALREADY_PROCESSING once it is being charged. */
  async cancelPayment(id: string): Promise<Payment> {
    const { data, error, response } = await this.api.DELETE("/v1/scheduled-payments/{paymentId}", { params: { path: { paymentId: id } } });
    return answer(data, error, response);
  }

  /** Every payment of the caller, newest first, page after page. */
  async *payments(f: { status?: Status; pageSize?: number } = {}): AsyncGenerator<Payment> {
    let cursor: string | undefined;
    do {
      const { data, error, response } = await this.api.GET("/v1/scheduled-payments", {
        params: { query: { status: f.status, pageSize: f.pageSize, cursor } },
      });
      const page = answer(data, error, response);
      yield* page.payments ?? [];
      cursor = page.nextCursor || undefined;
    } while (cursor);
  }

  /**
   * Schedules many payments in batches of at most maxBatch items (and 4
   * MiB). Each item's requestId (its idempotency key) is filled in items
   * itself when empty: called again with the same items after an error,
   * it makes each payment once. The results are in items' order, each
   * index the item's.
   */
  async createPayments(items: NewPayment[]): Promise<BatchResult[]> {
    for (const it of items) it.requestId ||= newKey();
    const out: BatchResult[] = [];
    for (let from = 0; from < items.length;) {
      let to = from;
      let size = 0;
      while (to < items.length && to - from < maxBatch) {
        const n = Buffer.byteLength(JSON.stringify(items[to]));
        if (to > from && size + n > maxBatchBytes) break;
        size += n + 1;
        to++;
      }
      const { data, error, response } = await this.api.POST("/v1/scheduled-payments:batchCreate", {
        body: { items: items.slice(from, to) }, headers: { [retrySafeHeader]: "1" },
      });
      for (const r of answer(data, error, response).results ?? []) {
        out.push({ ...r, index: (r.index ?? 0) + from });
      }
      from = to;
    }
    return out;
  }

  /** Makes a recurring schedule, with an idempotency key as createPayment's. */
  async createSchedule(s: NewSchedule, o: CreateOptions = {}): Promise<Created<Schedule>> {
    const key = o.idempotencyKey ?? newKey();
    const { data, error, response } = await this.api.POST("/v1/schedules", {
      params: { header: { "Idempotency-Key": key } }, body: s, signal: o.signal,
    });
    return { value: answer(data, error, response), replayed: response.headers.get("idempotent-replayed") === "true", idempotencyKey: key };
  }

  /** Reads a schedule and its latest occurrences made. */
  async getSchedule(id: string) {
    const { data, error, response } = await this.api.GET("/v1/schedules/{scheduleId}", { params: { path: { scheduleId: id } } });
    return answer(data, error, response);
  }

  /** Every schedule of the caller, newest first. */
  async *schedules(pageSize?: number): AsyncGenerator<Schedule> {
    let cursor: string | undefined;
    do {
      const { data, error, response } = await this.api.GET("/v1/schedules", { params: { query: { pageSize, cursor } } });
      const page = answer(data, error, response);
      yield* page.schedules ?? [];
      cursor = page.nextCursor || undefined;
    } while (cursor);
  }

  /** Pauses a schedule until resumeAt (absent: until resumed). */
  async pauseSchedule(id: string, resumeAt?: Date) {
    const { data, error, response } = await this.api.POST("/v1/schedules/{scheduleId}:pause", {
      params: { path: { scheduleId: id } }, body: { resumeAt: resumeAt?.toISOString() },
    });
    return answer(data, error, response);
  }

  /** Resumes a paused schedule. */
  async resumeSchedule(id: string) {
    const { data, error, response } = await this.api.POST("/v1/schedules/{scheduleId}:resume", { params: { path: { scheduleId: id } }, body: {} });
    return answer(data, error, response);
  }

  /** Ends a schedule for good. */
  async cancelSchedule(id: string) {
    const { data, error, response } = await this.api.POST("/v1/schedules/{scheduleId}:cancel", { params: { path: { scheduleId: id } }, body: {} });
    return answer(data, error, response);
  }

  /** A plan's next occurrences, each with why it moved. */
  async previewSchedule(p: Schemas["v1PreviewScheduleRequest"]) {
    const { data, error, response } = await this.api.POST("/v1/schedules:preview", { body: p });
    return answer(data, error, response).occurrences ?? [];
  }

  /** Registers a webhook endpoint of the token's tenant; the answer holds its secret, once. */
  async createEndpoint(e: NewEndpoint) {
    const { data, error, response } = await this.api.POST("/v1/webhook-endpoints", { body: e });
    return answer(data, error, response);
  }

  /** The tenant's endpoints. */
  async endpoints(): Promise<Endpoint[]> {
    const { data, error, response } = await this.api.GET("/v1/webhook-endpoints");
    return answer(data, error, response).endpoints ?? [];
  }

  /** Gives an endpoint a new secret; the old one keeps signing for overlapSeconds (0: 24 h). */
  async rotateEndpointSecret(id: string, overlapSeconds = 0): Promise<string> {
    const { data, error, response } = await this.api.POST("/v1/webhook-endpoints/{endpointId}:rotateSecret", {
      params: { path: { endpointId: id } }, body: { overlapSeconds },
    });
    return answer(data, error, response).secret ?? "";
  }

  /** Replaces a schedule's payment and plan (every field); what was made ahead is made again as it now reads. */
  async updateSchedule(id: string, s: Schemas["SchedulesServiceUpdateScheduleBody"]) {
    const { data, error, response } = await this.api.PUT("/v1/schedules/{scheduleId}", { params: { path: { scheduleId: id } }, body: s });
    return answer(data, error, response);
  }

  /** The delivery log of a payment or an endpoint, newest first. */
  async webhookAttempts(f: { paymentId?: string; endpointId?: string; pageSize?: number }) {
    const { data, error, response } = await this.api.GET("/v1/webhook-attempts", { params: { query: f } });
    return answer(data, error, response).attempts ?? [];
  }

  /** Delivers one message (by its webhook-id) to an endpoint again, now. */
  async resendMessage(endpointId: string, webhookId: string): Promise<void> {
    const { data, error, response } = await this.api.POST("/v1/webhook-endpoints/{endpointId}:resend", {
      params: { path: { endpointId } }, body: { webhookId },
    });
    answer(data, error, response);
  }

  /** Delivers again every failed message of an endpoint noted since (and before until); returns how many. */
  async recoverMessages(endpointId: string, since: Date, until?: Date): Promise<number> {
    const { data, error, response } = await this.api.POST("/v1/webhook-endpoints/{endpointId}:recover", {
      params: { path: { endpointId } }, body: { since: since.toISOString(), until: until?.toISOString() },
    });
    return Number(answer(data, error, response).recovered ?? 0);
  }

  /** Enables or disables an endpoint. */
  async setEndpointEnabled(id: string, enabled: boolean): Promise<void> {
    const { data, error, response } = await this.api.POST("/v1/webhook-endpoints/{endpointId}:setEnabled", {
      params: { path: { endpointId: id } }, body: { enabled },
    });
    answer(data, error, response);
  }
}

/** answer is an answer's data, or its refusal thrown as a PayschedError. */
function answer<T>(data: T | undefined, error: unknown, response: Response): T {
  if (response.ok && data !== undefined) return data;
  throw new PayschedError(response.status, error, response.headers.get("x-request-id") ?? "");
}
