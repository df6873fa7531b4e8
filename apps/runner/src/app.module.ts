import { Module } from '@nestjs/common';
import { GantryRuntimeModule } from '@gantry/service-runtime';
import { loadRunnerConfig } from './application/runner-config.js';
import { RUNNER_CONFIG, RunnerDaemon } from './application/runner-daemon.js';

@Module({
  imports: [GantryRuntimeModule.forClient({ service: 'runner', defaultPort: 3105 })],
  providers: [{ provide: RUNNER_CONFIG, useFactory: () => loadRunnerConfig() }, RunnerDaemon],
})
export class AppModule {}
