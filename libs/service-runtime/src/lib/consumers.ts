import { Injectable } from '@nestjs/common';
import { EventConsumer, type EventConsumerOptions } from '@gantry/messaging';

/** The service's durable consumers: started after bootstrap, stopped before shutdown, part of readiness. */
@Injectable()
export class Consumers {
  private readonly consumers: EventConsumer[] = [];
  private started = false;

  constructor(private readonly defaults: () => Pick<EventConsumerOptions, 'bus' | 'pool' | 'logger'>) {}

  add(options: Omit<EventConsumerOptions, 'bus' | 'pool' | 'logger'> & Partial<Pick<EventConsumerOptions, 'logger'>>): EventConsumer {
    const consumer = new EventConsumer({ ...this.defaults(), ...options });
    this.consumers.push(consumer);
    if (this.started) consumer.start();
    return consumer;
  }

  startAll(): void {
    this.started = true;
    for (const consumer of this.consumers) consumer.start();
  }

  async stopAll(): Promise<void> {
    this.started = false;
    await Promise.all(this.consumers.map((c) => c.stop()));
  }

  get all(): readonly EventConsumer[] {
    return this.consumers;
  }
}
