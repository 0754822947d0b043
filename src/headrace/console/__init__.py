"""``headrace console``: a web console for any Kafka-protocol cluster.

Server-rendered pages (aiohttp + Jinja2) over the same Kafka clients the CLI uses: topics
(partitions, offsets, configs, the retention window in time), a message browser (from an
offset or a time, filters on key, value and headers, values decoded as JSON or through the
schema registry, a live tail), consumer groups (members, lag in records and seconds, lag
over time, offset reset with a dry run), transactions, schemas, and pipelines (their
Prometheus metrics, plotted over the last hour).

Modules: ``browse`` (reading and decoding messages), ``history`` (samples kept for the
plots), ``plots`` (SVG), ``app`` (routes and error pages), ``server`` (start-up).
"""
