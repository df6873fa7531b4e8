import { Module } from '@nestjs/common';
import { GantryRuntimeModule } from '@gantry/service-runtime';

@Module({
  imports: [GantryRuntimeModule.forRoot({ service: 'job-service', context: 'jobs', defaultPort: 3101 })],
})
export class AppModule {}
