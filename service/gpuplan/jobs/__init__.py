"""Heavy work on a job queue in Redis: the API submits, ``gpuplan worker`` runs.

The queue is RQ's (docs/deploy.md says why RQ): a job is a JSON payload on a Redis
list, one list per kind and priority; a worker process keeps torch and transformers
imported and forks a child per job, so every trace runs in a fresh process that a
time limit can kill and that leaves nothing behind. This package holds the client the
API uses (:mod:`gpuplan.jobs.queue`), the job functions a worker's child runs
(:mod:`gpuplan.jobs.tasks`), the worker (:mod:`gpuplan.jobs.worker`), how a worker
takes a job without losing it (:mod:`gpuplan.jobs.handoff`) and the metrics
both sides export (:mod:`gpuplan.jobs.metrics`). It never imports litestar: the API
maps its records to HTTP.
"""
