"""The web console: what a Kafka user looks at, served by `kompakt serve` on the admin listener.

Modules: pages.py (the routes; mounted by kompakt.broker.admin.app under the admin API's token
and TLS), data.py (what each page shows, from the admin API's views and the cleaner's history),
kafka_calls.py (topic, config and group changes through the broker's own Kafka handlers),
records.py (the record browser), charts.py (matplotlib charts), templates/ (Jinja2) and static/
(our own CSS and JS: pages poll their JSON and redraw their live parts).
"""
