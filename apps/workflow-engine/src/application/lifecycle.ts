import { Inject, Injectable, type BeforeApplicationShutdown, type OnApplicationShutdown } from '@nestjs/common';
import { ProcessEpoch } from '../infrastructure/liveness/process-epoch.js';
import { OnEnterDispatcher } from './dispatch/on-enter-dispatcher.js';
import { StepExits } from './triggers/step-exits.js';

/** A clean stop: the dispatches under way finish (an exit waiting to run again is left to the next start), then the epoch lock is released (peers see the process gone). */
@Injectable()
export class EngineLifecycle implements BeforeApplicationShutdown, OnApplicationShutdown {
  constructor(
    @Inject(OnEnterDispatcher) private readonly dispatcher: OnEnterDispatcher,
    @Inject(StepExits) private readonly exits: StepExits,
    @Inject(ProcessEpoch) private readonly process: ProcessEpoch,
  ) {}

  async beforeApplicationShutdown(): Promise<void> {
    await this.exits.drain();
    await this.dispatcher.drain();
  }

  async onApplicationShutdown(): Promise<void> {
    await this.process.close();
  }
}
