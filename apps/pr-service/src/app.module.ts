import { Module } from '@nestjs/common';
import { GantryRuntimeModule } from '@gantry/service-runtime';

@Module({
  imports: [GantryRuntimeModule.forRoot({ service: 'pr-service', context: 'prs', defaultPort: 3103 })],
})
export class AppModule {}
