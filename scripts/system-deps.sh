#!/usr/bin/env bash
# Debian packages incsync needs that PyPI cannot provide. Installs only what is missing.
#   scripts/system-deps.sh demo   Java for Spark: all `make demo` needs (lake source, Delta and PostgreSQL
#                                 destinations through delta-rs and psycopg)
#   scripts/system-deps.sh test   also the JDBC drivers of Spark's JDBC sources (Maven Central is not assumed
#                                 reachable), Chromium for the UI end-to-end test, the MariaDB client (default)
set -euo pipefail
what="${1:-test}"
need=()
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
if [ "$what" = "test" ]; then
[ -f /usr/share/java/postgresql.jar ] || need+=(libpostgresql-jdbc-java)
[ -f /usr/share/java/mariadb-java-client.jar ] || need+=(libmariadb-java)
command -v chromium >/dev/null 2>&1 || need+=(chromium)   # headless UI test of the Dagster asset page
command -v mariadb >/dev/null 2>&1 || command -v mysql >/dev/null 2>&1 || need+=(mariadb-client)   # MariaDB source tests create their databases with it
fi
if [ -n "${INCSYNC_DEPS_DRY_RUN:-}" ]; then echo "would install: ${need[*]}"; exit 0; fi
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ] && ! command -v sudo >/dev/null 2>&1; then
  echo "incsync needs these Debian packages: ${need[*]} (run as root: apt-get install ${need[*]})" >&2
  exit 1
fi
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
echo "installing Debian packages: ${need[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
