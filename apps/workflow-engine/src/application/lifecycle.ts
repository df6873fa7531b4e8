import { Inject, Injectable, type BeforeApplicationShutdown, type OnApplicationShutdown } from '@nestjs/common';
import { ProcessEpoch } from '../infrastructure/liveness/process-epoch.js';
import { OnEnterDispatcher } from './dispatch/on-enter-dispatcher.js';
import { EntryFlow } from './entry-flow.js';
import { RecoveryScan } from './recovery/recovery-scan.js';
import { StepExits } from './triggers/step-exits.js';
import { UnansweredMoves } from './unanswered-moves.js';

/** A clean stop: the dispatches under way finish (an exit waiting to run again, an entry waiting for the scan of stopped entries, a freed seat waiting to be offered again, are left to the next start), then the epoch lock is released (peers see the process gone). */
@Injectable()
export class EngineLifecycle implements BeforeApplicationShutdown, OnApplicationShutdown {
  constructor(
    @Inject(OnEnterDispatcher) private readonly dispatcher: OnEnterDispatcher,
    @Inject(StepExits) private readonly exits: StepExits,
    @Inject(RecoveryScan) private readonly recovery: RecoveryScan,
    @Inject(EntryFlow) private readonly flow: EntryFlow,
    @Inject(UnansweredMoves) private readonly unanswered: UnansweredMoves,
    @Inject(ProcessEpoch) private readonly process: ProcessEpoch,
  ) {}

  async beforeApplicationShutdown(): Promise<void> {
    await this.exits.drain();
    // Together: a scan's dispatch waiting on a session action gives up once the dispatcher is stopping.
    // The scans (of stopped entries, takeovers) end before the epoch lock goes, below.
    await Promise.all([this.recovery.stop(), this.dispatcher.drain(), this.flow.stop(), this.unanswered.stop()]);
  }

  async onApplicationShutdown(): Promise<void> {
    await this.process.close();
  }
}
