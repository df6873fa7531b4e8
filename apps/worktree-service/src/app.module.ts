import { Module } from '@nestjs/common';
import { GantryRuntimeModule } from '@gantry/service-runtime';

@Module({
  imports: [GantryRuntimeModule.forRoot({ service: 'worktree-service', context: 'worktrees', defaultPort: 3104 })],
})
export class AppModule {}
