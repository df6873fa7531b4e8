import { Module } from '@nestjs/common';
import { GantryRuntimeModule } from '@gantry/service-runtime';

@Module({
  imports: [GantryRuntimeModule.forRoot({ service: 'workflow-engine', context: 'workflow', defaultPort: 3102 })],
})
export class AppModule {}
