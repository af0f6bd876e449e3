"""The item catalog and its change events, shared by the streaming writer and by serving: both read the
catalog (the writer to backfill, serving to recompute a missing item) and speak the same event schema
(serving publishes refresh requests to the change topic), so these modules sit below both.

database         the catalog database (SQLAlchemy): items, the change sequence, change events
events           the change event schema: the only decoder/encoder of the change topic
kafka_settings   Kafka client settings from `GISTRANK_KAFKA_*`, topic creation
publisher        publish change events to the change topic (acks=all)
sample           the bundled sample catalog and its queries (package data under data/)
"""
