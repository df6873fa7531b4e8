import { Module } from '@nestjs/common';
import { GantryRuntimeModule } from '@gantry/service-runtime';

@Module({
  imports: [GantryRuntimeModule.forClient({ service: 'runner', defaultPort: 3105 })],
})
export class AppModule {}
