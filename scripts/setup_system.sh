#!/usr/bin/env bash
# Installs the real services GistRank's tests and demo start themselves (each bound to 127.0.0.1):
# redis-server, promtool and the docker-compose parser (compose-file validation) from Debian, the Apache Kafka broker jars from Maven Central.
# Idempotent and quick when everything is present.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v redis-server >/dev/null || need+=(redis-server)
command -v promtool >/dev/null || need+=(prometheus)
command -v docker-compose >/dev/null || need+=(docker-compose)
if ((${#need[@]})); then
    SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
    echo "installing Debian packages: ${need[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
scripts/kafka.sh fetch
