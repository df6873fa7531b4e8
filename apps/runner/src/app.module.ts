import { Module } from '@nestjs/common';
import { GantryRuntimeModule } from '@gantry/service-runtime';
import { runnerSettings } from './application/runner-config.js';
import { RunnerDaemon } from './application/runner-daemon.js';

@Module({
  imports: [GantryRuntimeModule.forClient({ service: 'runner', defaultPort: 3105, settings: [runnerSettings] })],
  providers: [RunnerDaemon],
})
export class AppModule {}
