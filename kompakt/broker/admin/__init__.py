"""The admin HTTP API: one room for everything an operator drives over HTTP or from `kompakt admin`.

Modules:
  app.py      the aiohttp application on the broker's loop (`start_admin` / `stop_admin`, the routes)
  views.py    JSON views of partitions and the cleaner, and Kafka error -> HTTP status (no aiohttp)
  record_count.py  exact record counts from batch headers, each segment's tally kept (count=true, console)
  openapi.py  the OpenAPI 3 document served at /openapi.json (a test keeps it equal to the routes)
  cmd.py      `kompakt admin ...`: the same endpoints from a shell, standard library only

Invariant: nothing here is imported on the broker's request path; the broker imports `app` only when
`metrics.port` is not 0, and the CLI imports `cmd` only, so `kompakt admin` starts without aiohttp.
"""
