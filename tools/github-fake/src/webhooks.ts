import { createHmac, randomUUID } from 'node:crypto';
import { sign } from '@octokit/webhooks-methods';

/*
 * Webhook deliveries as GitHub makes them: one POST per configured hook with the JSON body signed
 * (X-Hub-Signature-256 over the exact bytes sent), the event name in X-GitHub-Event and a UUID in
 * X-GitHub-Delivery — the event's GUID, the same in every hook's delivery of it (GitHub: "shared with all
 * deliveries for all webhooks that subscribe to this event"). GitHub waits 10 s for an answer, does not
 * retry a failed delivery by itself, and a redelivery (made by hand) carries the same GUID. The control
 * API names deliveries by that GUID, and acts on every hook's delivery of the event. Tests can hold, drop, duplicate, delay
 * and reorder deliveries to show that the receiver does not depend on GitHub's timing.
 */

export interface WebhookTarget {
  url: string;
  secret?: string;
}

export type DeliveryState = 'held' | 'pending' | 'delivered' | 'failed' | 'dropped';

export interface DeliveryAttempt {
  at: string;
  status: number | null;
  error: string | null;
  durationMs: number;
  redelivery: boolean;
}

export interface Delivery {
  /** The event's GUID (X-GitHub-Delivery): every hook's delivery of one event has the same. */
  id: string;
  hookId: number;
  url: string;
  event: string;
  action: string | null;
  /** The exact body sent (the signature is over these bytes). */
  body: string;
  state: DeliveryState;
  createdAt: string;
  attempts: DeliveryAttempt[];
}

export interface DeliveryRule {
  event?: string;
  action?: string;
  /** How many matching deliveries the rule applies to (default 1). */
  count?: number;
  effect: 'drop' | 'duplicate' | 'hold' | 'delay';
  delayMs?: number;
}

const DELIVERY_TIMEOUT_MS = 10_000;
const MAX_KEPT_DELIVERIES = 10_000;

export class WebhookDispatcher {
  private targets: (WebhookTarget & { hookId: number })[] = [];
  private readonly deliveries: Delivery[] = [];
  private holding = false;
  private readonly rules: (DeliveryRule & { remaining: number })[] = [];
  /** Deliveries in flight, so close() can wait for them. */
  private readonly inFlight = new Set<Promise<void>>();
  private nextHookId = 1;

  constructor(
    targets: WebhookTarget[],
    private readonly log: (message: string, fields: Record<string, unknown>) => void,
  ) {
    this.setTargets(targets);
  }

  setTargets(targets: WebhookTarget[]): void {
    this.targets = targets.map((t) => ({ ...t, hookId: this.nextHookId++ }));
  }

  /** Creates one delivery per hook for an event, and sends it unless held or told otherwise. */
  emit(event: string, payload: Record<string, unknown>): void {
    const action = typeof payload.action === 'string' ? payload.action : null;
    const body = JSON.stringify(payload);
    const guid = randomUUID();
    for (const target of this.targets) {
      const delivery: Delivery = {
        id: guid,
        hookId: target.hookId,
        url: target.url,
        event,
        action,
        body,
        state: 'pending',
        createdAt: new Date().toISOString(),
        attempts: [],
      };
      this.deliveries.push(delivery);
      // A long-running fake keeps the most recent deliveries (older ones can no longer be redelivered).
      if (this.deliveries.length > MAX_KEPT_DELIVERIES) this.deliveries.splice(0, this.deliveries.length - MAX_KEPT_DELIVERIES);
      const rule = this.takeRule(event, action);
      if (rule?.effect === 'drop') {
        delivery.state = 'dropped';
        continue;
      }
      if (this.holding || rule?.effect === 'hold') {
        delivery.state = 'held';
        continue;
      }
      if (rule?.effect === 'delay') {
        // Due by the wall clock its `createdAt` is read on: Node's timers run on a monotonic clock in
        // whole milliseconds and may fire up to one early by `Date.now()`; one that did waits the rest.
        const due = Date.parse(delivery.createdAt) + (rule.delayMs ?? 1000);
        const sendWhenDue = () => {
          const left = due - Date.now();
          if (left > 0) setTimeout(sendWhenDue, left).unref();
          else this.sendInBackground(delivery, false);
        };
        setTimeout(sendWhenDue, Math.max(0, due - Date.now())).unref();
        continue;
      }
      this.sendInBackground(delivery, false);
      if (rule?.effect === 'duplicate') this.sendInBackground(delivery, true);
    }
  }

  private takeRule(event: string, action: string | null): DeliveryRule | undefined {
    const index = this.rules.findIndex((r) => (!r.event || r.event === event) && (!r.action || r.action === action));
    if (index === -1) return undefined;
    const rule = this.rules[index]!;
    rule.remaining -= 1;
    if (rule.remaining <= 0) this.rules.splice(index, 1);
    return rule;
  }

  addRule(rule: DeliveryRule): void {
    this.rules.push({ ...rule, remaining: rule.count ?? 1 });
  }

  hold(): void {
    this.holding = true;
  }

  /** Stops holding and sends the held deliveries, in `order` (ids) first, then the rest oldest first. */
  release(order?: string[]): void {
    this.holding = false;
    const held = this.deliveries.filter((d) => d.state === 'held');
    const ordered = [...(order ?? []).flatMap((id) => held.filter((d) => d.id === id)), ...held.filter((d) => !order?.includes(d.id))];
    // Sequentially, so the receiver sees them in the order asked for.
    const run = async () => {
      for (const delivery of ordered) await this.send(delivery, false);
    };
    this.track(run()).catch((error: unknown) => this.log('held webhooks not sent', { error: String(error) }));
  }

  /** Drops every hook's held (or pending) delivery of the event. */
  drop(id: string): Delivery {
    const deliveries = this.ofEvent(id);
    for (const delivery of deliveries) if (delivery.state === 'held' || delivery.state === 'pending') delivery.state = 'dropped';
    return deliveries[0]!;
  }

  /** Sends every hook's delivery of the event again with the same GUID and body (GitHub's "Redeliver"). */
  async redeliver(id: string): Promise<Delivery> {
    const deliveries = this.ofEvent(id);
    await Promise.all(deliveries.map((delivery) => this.send(delivery, true)));
    return deliveries[0]!;
  }

  list(filter: { event?: string; action?: string } = {}): Delivery[] {
    return this.deliveries.filter((d) => (!filter.event || d.event === filter.event) && (!filter.action || d.action === filter.action));
  }

  /** Every hook's delivery of the event with this GUID (at least one). */
  private ofEvent(id: string): Delivery[] {
    const deliveries = this.deliveries.filter((d) => d.id === id);
    if (deliveries.length === 0) throw new Error(`no delivery ${id}`);
    return deliveries;
  }

  async close(): Promise<void> {
    await Promise.allSettled([...this.inFlight]);
  }

  /** Keeps a delivery in flight until it ends; the caller still sees how it ended. */
  private track(promise: Promise<void>): Promise<void> {
    this.inFlight.add(promise);
    const forget = () => this.inFlight.delete(promise);
    promise.then(forget, forget);
    return promise;
  }

  private send(delivery: Delivery, redelivery: boolean): Promise<void> {
    const target = this.targets.find((t) => t.hookId === delivery.hookId);
    return this.track(this.post(delivery, target?.secret, redelivery));
  }

  /** Sends without waiting; an HTTP failure is recorded as the delivery's attempt, anything else is logged. */
  private sendInBackground(delivery: Delivery, redelivery: boolean): void {
    this.send(delivery, redelivery).catch((error: unknown) => {
      delivery.state = 'failed';
      this.log('webhook not sent', { delivery: delivery.id, event: delivery.event, error: String(error) });
    });
  }

  private async post(delivery: Delivery, secret: string | undefined, redelivery: boolean): Promise<void> {
    const headers: Record<string, string> = {
      'content-type': 'application/json',
      'user-agent': 'GitHub-Hookshot/github-fake',
      'x-github-event': delivery.event,
      'x-github-delivery': delivery.id,
      'x-github-hook-id': String(delivery.hookId),
      'x-github-hook-installation-target-type': 'repository',
    };
    const targetId = (JSON.parse(delivery.body) as { repository?: { id?: number } }).repository?.id;
    if (targetId !== undefined) headers['x-github-hook-installation-target-id'] = String(targetId);
    if (secret) {
      headers['x-hub-signature-256'] = await sign(secret, delivery.body);
      // GitHub still sends the legacy SHA-1 signature beside it (@octokit/webhooks-methods signs SHA-256 only).
      headers['x-hub-signature'] = `sha1=${createHmac('sha1', secret).update(delivery.body).digest('hex')}`;
    }
    const started = Date.now();
    const attempt: DeliveryAttempt = { at: new Date(started).toISOString(), status: null, error: null, durationMs: 0, redelivery };
    try {
      const response = await fetch(delivery.url, { method: 'POST', headers, body: delivery.body, signal: AbortSignal.timeout(DELIVERY_TIMEOUT_MS) });
      await response.arrayBuffer().catch(() => undefined);
      attempt.status = response.status;
      delivery.state = response.ok ? 'delivered' : 'failed';
    } catch (error) {
      attempt.error = error instanceof Error ? error.message : String(error);
      delivery.state = 'failed';
    }
    attempt.durationMs = Date.now() - started;
    delivery.attempts.push(attempt);
    this.log('webhook delivered', { delivery: delivery.id, event: delivery.event, action: delivery.action, status: attempt.status, error: attempt.error, redelivery });
  }
}
