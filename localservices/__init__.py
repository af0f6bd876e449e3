"""Throwaway local services for the tests, the demo and the benchmarks, bound to 127.0.0.1: never part of
a deployment, which runs its own Kafka and Redis. Imports nothing of the project.

kafka_broker   a single-node Kafka broker (KRaft), driven through scripts/kafka.sh
redis_server   a redis-server, or a Redis Cluster of several
"""
