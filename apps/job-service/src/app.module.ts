import { Module } from '@nestjs/common';
import { GantryRuntimeModule } from '@gantry/service-runtime';
import { AgentReportHandlers } from './application/agent-reports.handlers.js';
import { ClaimPicker } from './application/claim-picker.js';
import { JobCommandHandlers } from './application/job-commands.js';
import { jobServiceSettings } from './application/job-service-settings.js';
import { LeaseExpirySweep } from './application/lease-expiry.js';
import { enqueueOffers, JobOffers } from './application/offers.js';
import { OfferSweep } from './application/offer-sweep.js';
import { ProductCommandHandlers } from './application/product-commands.js';
import { JobQueries } from './application/queries.js';
import { SprintRunCommandHandlers } from './application/sprint-run-commands.js';
import { SprintRunEffects } from './application/sprint-run-effects.js';
import { SprintRunRequests } from './application/sprint-run-requests.js';
import { SprintRunReactions } from './application/sprint-run-reactions.js';
import { jobServiceMigrations } from './infrastructure/migrations.js';
import { jobServiceProjections } from './infrastructure/projections.js';

@Module({
  imports: [
    GantryRuntimeModule.forRoot({
      service: 'job-service',
      context: 'jobs',
      defaultPort: 3101,
      migrations: jobServiceMigrations,
      projections: jobServiceProjections,
      dispatchStream: true,
      // An enqueue's job offer goes out with its event (see JobOffers for the requeues').
      companions: enqueueOffers,
      settings: [jobServiceSettings],
    }),
  ],
  // Entry points: commands (@CommandHandler) and durable consumers (@DurableConsumer).
  controllers: [ProductCommandHandlers, JobCommandHandlers, JobQueries, SprintRunCommandHandlers, AgentReportHandlers, JobOffers, SprintRunReactions, SprintRunEffects, SprintRunRequests],
  providers: [ClaimPicker, LeaseExpirySweep, OfferSweep],
})
export class AppModule {}
