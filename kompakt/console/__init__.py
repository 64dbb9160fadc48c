"""The web console: what a Kafka user looks at, served by `kompakt serve` on the admin listener.

Modules: pages.py (the pages and charts, and `add_console`, which kompakt.broker.admin.app calls
to mount everything under the admin API's token and TLS), render.py (a page as HTML from a Jinja2
template or as JSON), actions.py (the forms: topic and group changes, compact/pause/resume),
access.py (sign-in with the admin token, same-origin forms), data.py (what each page shows, from
the admin API's views and the cleaner's history), kafka_calls.py (changes and questions through
the broker's own Kafka handlers), records.py (the record browser), charts.py (matplotlib charts),
templates/ (Jinja2) and static/ (our own CSS and JS: pages poll their JSON and redraw their live
parts).
"""
