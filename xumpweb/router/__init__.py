"""The router's app: what the process holding a store's lease runs and offers.

tasks.py       its Celery tasks: route a burst of traffic, tick, trim, expire, heartbeat
operations.py  the operations it answers for every other process (engine.relay calls)
codec.py       messages and deliveries as JSON, as those answers and the API show them
apps.py        hands /metrics' counters to the router at start-up

The router itself (lease, drain loop, snapshots) is runtime.Router.
"""
