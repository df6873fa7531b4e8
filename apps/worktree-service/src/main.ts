import 'reflect-metadata';
import { runService } from '@gantry/service-runtime';
import { AppModule } from './app.module.js';

await runService(AppModule, 'worktree-service');
